//! `picogent check`: validates the config and the templates, reaches the tracker (REST and
//! WebSocket) and the model endpoint, and reports each result on one line with what to fix.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;
use crate::prompts::Prompts;
use crate::secret::Secret;
use crate::tracker::TrackerClient;

/// One line of the report.
struct Line {
    ok: bool,
    what: String,
    detail: String,
}

fn print(lines: &[Line]) {
    for line in lines {
        let mark = if line.ok { "ok  " } else { "FAIL" };
        println!("{mark} {:<16} {}", line.what, line.detail);
    }
}

pub async fn run_cli(config_path: &Path) -> anyhow::Result<ExitCode> {
    let mut lines = Vec::new();
    let config = match Config::load(config_path) {
        Ok(config) => {
            lines.push(Line { ok: true, what: "config".into(), detail: format!("{} is valid", config_path.display()) });
            config
        }
        Err(error) => {
            lines.push(Line { ok: false, what: "config".into(), detail: format!("{error}") });
            print(&lines);
            return Ok(ExitCode::FAILURE);
        }
    };
    lines.push(match Prompts::load(&config.prompts_dir) {
        Ok(_) => Line {
            ok: true,
            what: "prompts".into(),
            detail: format!("templates in {} render", config.prompts_dir.display()),
        },
        Err(error) => Line { ok: false, what: "prompts".into(), detail: error.to_string() },
    });
    let token = match Secret::from_env(&config.tracker.token_env) {
        Ok(token) => {
            lines.push(Line {
                ok: true,
                what: "tracker token".into(),
                detail: format!("{} is set", config.tracker.token_env),
            });
            Some(token)
        }
        Err(error) => {
            lines.push(Line { ok: false, what: "tracker token".into(), detail: error.to_string() });
            None
        }
    };
    if let Some(token) = token {
        let mut tracker = config.tracker.clone();
        tracker.retry.max_attempts = 1;
        match TrackerClient::new(&tracker, token) {
            Ok(client) => {
                lines.push(check_rest(&client, &config).await);
                lines.push(match crate::transport::probe(&client, Duration::from_secs(5)).await {
                    Ok(()) => Line {
                        ok: true,
                        what: "tracker events".into(),
                        detail: format!("{} answers ping", crate::secret::shown_url(&client.ws_url())),
                    },
                    Err(error) => Line { ok: false, what: "tracker events".into(), detail: error },
                });
            }
            Err(error) => lines.push(Line { ok: false, what: "tracker REST".into(), detail: error.to_string() }),
        }
    }
    let model = check_model(&config).await;
    let reachable = model.ok;
    lines.push(model);
    if reachable {
        lines.extend(check_server(&config).await);
        lines.push(check_tool_call(&config).await);
    }
    print(&lines);
    Ok(if lines.iter().all(|l| l.ok) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn check_rest(client: &TrackerClient, config: &Config) -> Line {
    let what = "tracker REST".to_string();
    match client.get_member("me").await {
        Ok(me) if me.slug == config.slug => Line {
            ok: true,
            what,
            detail: format!("{} knows the token as @{} ({})", client.api_base(), me.slug, me.kind.as_str()),
        },
        Ok(me) => Line {
            ok: false,
            what,
            detail: format!(
                "the token belongs to @{}, but agent.json says slug {:?}: set slug to {:?} or use the agent's token",
                me.slug, config.slug, me.slug
            ),
        },
        Err(error) => Line {
            ok: false,
            what,
            detail: format!("{error} (is tracker.url {} right?)", crate::secret::shown_url(&config.tracker.url)),
        },
    }
}

async fn check_model(config: &Config) -> Line {
    let what = "model endpoint".to_string();
    let key = match config.llm.api_key() {
        Ok(key) => key,
        Err(error) => return Line { ok: false, what, detail: error.to_string() },
    };
    match crate::llm::probe::probe(&config.llm, key).await {
        Ok(detail) => Line { ok: true, what, detail },
        Err(error) => Line { ok: false, what, detail: error },
    }
}

/// What the server says about itself at `/props` (llama.cpp's server): whether its chat template
/// takes tools, and whether its context holds `llm.context_tokens`. Servers without it: no lines.
async fn check_server(config: &Config) -> Vec<Line> {
    let key = config.llm.api_key().ok().flatten();
    let Some(props) = crate::llm::probe::server_props(&config.llm, key).await else { return Vec::new() };
    let build = props.build.as_deref().map(|b| format!(" ({b})")).unwrap_or_default();
    let mut lines = Vec::new();
    if let Some(supports) = props.supports_tools {
        lines.push(Line {
            ok: supports,
            what: "server tools".into(),
            detail: if supports {
                format!("the server{build} says its chat template takes tools")
            } else {
                format!(
                    "the server{build} says its chat template does not take tools: it drops the tools picogent \
                     sends, and the model can only write text. Start llama-server with --jinja and a tool-capable \
                     --chat-template-file (see docs/llm.md)"
                )
            },
        });
    }
    if let Some(context) = props.context_tokens {
        let configured = config.llm.context_tokens;
        let slots = match props.slots {
            Some(slots) if config.llm.max_concurrent_requests.is_none_or(|cap| u64::from(cap) > slots) => format!(
                "; it works on {slots} request(s) at once: set llm.max_concurrent_requests to {slots} so the \
                 others do not wait past llm.timeout_ms in its queue"
            ),
            _ => String::new(),
        };
        lines.push(if configured <= context {
            Line {
                ok: true,
                what: "server context".into(),
                detail: format!("{context} tokens per request, llm.context_tokens is {configured}{slots}"),
            }
        } else {
            Line {
                ok: false,
                what: "server context".into(),
                detail: format!(
                    "the server holds {context} tokens per request but llm.context_tokens is {configured}: set \
                     llm.context_tokens to {context} (or start the server with a larger -c){slots}"
                ),
            }
        });
    }
    lines
}

/// One small request with one tool: does the model call tools, and does the server take the
/// configured parameters?
async fn check_tool_call(config: &Config) -> Line {
    let what = "model tool call".to_string();
    let key = match config.llm.api_key() {
        Ok(key) => key,
        Err(error) => return Line { ok: false, what, detail: error.to_string() },
    };
    match crate::llm::probe::probe_tool_call(&config.llm, key).await {
        Ok(probe) => {
            let refused = (!probe.refused_parameters.is_empty()).then(|| {
                let named: Vec<String> = probe.refused_parameters.iter().map(|p| format!("`{p}`")).collect();
                format!(
                    "; the server refused {}: change that setting in the llm section (see docs/llm.md)",
                    named.join(", ")
                )
            });
            let called = if probe.called_tool {
                format!("{} called the offered tool", config.llm.model)
            } else {
                format!(
                    "{} answered in text instead of calling the offered tool: it may not support tool calling \
                     (or the server's chat template drops tools)",
                    config.llm.model
                )
            };
            Line {
                ok: probe.called_tool && refused.is_none(),
                what,
                detail: format!("{called}{}", refused.unwrap_or_default()),
            }
        }
        Err(error) => Line { ok: false, what, detail: error.to_string() },
    }
}
