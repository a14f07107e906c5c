//! `picogent check`: validates the config and the templates, checks that the state folder can be
//! written, reaches the tracker (REST and WebSocket) and the model endpoint, and reports each
//! result on one line with what to fix.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::config::Config;
use crate::prompts::Prompts;
use crate::secret::Secret;
use crate::tracker::TrackerClient;

/// One line of the report.
struct Line {
    /// Works, but not as it should (`WARN`).
    warn: bool,
    ok: bool,
    what: String,
    detail: String,
}

fn print(lines: &[Line]) {
    for line in lines {
        let mark = match (line.ok, line.warn) {
            (false, _) => "FAIL",
            (true, true) => "WARN",
            (true, false) => "ok  ",
        };
        println!("{mark} {:<16} {}", line.what, line.detail);
    }
}

pub async fn run_cli(config_path: &Path) -> anyhow::Result<ExitCode> {
    let mut lines = Vec::new();
    let config = match Config::load(config_path) {
        Ok(config) => {
            lines.push(Line {
                warn: false,
                ok: true,
                what: "config".into(),
                detail: format!("{} is valid", config_path.display()),
            });
            config
        }
        Err(error) => {
            lines.push(Line { warn: false, ok: false, what: "config".into(), detail: format!("{error}") });
            print(&lines);
            return Ok(ExitCode::FAILURE);
        }
    };
    lines.push(match Prompts::load(&config.prompts_dir) {
        Ok(_) => Line {
            warn: false,
            ok: true,
            what: "prompts".into(),
            detail: format!("templates in {} render", config.prompts_dir.display()),
        },
        Err(error) => Line { warn: false, ok: false, what: "prompts".into(), detail: error.to_string() },
    });
    lines.push(check_state_folder(&config));
    lines.extend(check_sandbox(&config));
    lines.extend(check_coding_agents(&config).await);
    lines.extend(check_git(&config));
    lines.push(Line { warn: false, ok: true, what: "run scope".into(), detail: scope_words(&config.permissions) });
    let token = match Secret::from_env(&config.tracker.token_env) {
        Ok(token) => {
            lines.push(Line {
                warn: false,
                ok: true,
                what: "tracker token".into(),
                detail: format!("{} is set", config.tracker.token_env),
            });
            Some(token)
        }
        Err(error) => {
            lines.push(Line { warn: false, ok: false, what: "tracker token".into(), detail: error.to_string() });
            None
        }
    };
    if let Some(token) = token {
        let mut tracker = config.tracker.clone();
        tracker.retry.max_attempts = 1;
        match TrackerClient::new(&tracker, token) {
            Ok(client) => {
                lines.push(check_rest(&client, &config).await);
                lines.extend(check_schedules(&client, &config).await);
                lines.push(match crate::transport::probe(&client, Duration::from_secs(5)).await {
                    Ok(()) => Line {
                        warn: false,
                        ok: true,
                        what: "tracker events".into(),
                        detail: format!("{} answers ping", crate::secret::shown_url(&client.ws_url())),
                    },
                    Err(error) => {
                        Line { warn: false, ok: false, what: "tracker events".into(), detail: error.to_string() }
                    }
                });
            }
            Err(error) => {
                lines.push(Line { warn: false, ok: false, what: "tracker REST".into(), detail: error.to_string() })
            }
        }
    }
    let model = check_model(&config).await;
    let reachable = model.ok;
    lines.push(model);
    if reachable {
        // The tool call first: only the server's answer to it tells whether llama-server was
        // started without `--jinja` (its `/props` says nothing about it), which the advice on
        // its chat template depends on.
        let (tool_call, jinja_off) = check_tool_call(&config).await;
        lines.extend(check_server(&config, jinja_off).await);
        lines.push(tool_call);
        lines.push(check_cache(&config).await);
    }
    print(&lines);
    Ok(if lines.iter().all(|l| l.ok) { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The scope runs are held to, in words: what a run may change and how it is widened.
fn scope_words(permissions: &crate::config::PermissionsConfig) -> String {
    use crate::config::RunScope;
    let scope = match permissions.scope {
        RunScope::Run => "a run changes only its own task (or replies in its own thread)",
        RunScope::Project => "a run changes anything in its own project",
        RunScope::Any => "a run changes anything its tools reach",
    };
    let cross = if permissions.cross_scope_tools.is_empty() {
        String::new()
    } else {
        format!("; across tasks also: {}", permissions.cross_scope_tools.join(", "))
    };
    format!("permissions.scope \"{}\": {scope}{cross} (see docs/guarantees.md)", permissions.scope.as_str())
}

/// The schedules, when there are any: their projects are on the tracker, and when each fires next.
async fn check_schedules(client: &TrackerClient, config: &Config) -> Option<Line> {
    if config.schedules.is_empty() {
        return None;
    }
    let what = "schedules".to_string();
    let jobs = match crate::schedule::jobs(&config.schedules, Path::new(".")) {
        Ok(jobs) => jobs,
        Err(problem) => {
            return Some(Line {
                warn: false,
                ok: false,
                what,
                detail: format!("field `{}`: {}", problem.field, problem.message),
            });
        }
    };
    if let Err(error) = crate::runtime::check_schedule_projects(&jobs, client).await {
        return Some(Line { warn: false, ok: false, what, detail: format!("{error:#}") });
    }
    let now = crate::schedule::Clock::now_ms(&crate::schedule::SystemClock);
    let next: Vec<String> = jobs
        .iter()
        .map(|job| match job.cadence.next_after(now) {
            Some(at) => format!("{} ({}) next {}", job.name, job.kind.name(), job.cadence.local_time(at)),
            None => format!("{} ({}) never fires again", job.name, job.kind.name()),
        })
        .collect();
    Some(Line { warn: false, ok: true, what, detail: next.join("; ") })
}

async fn check_rest(client: &TrackerClient, config: &Config) -> Line {
    let what = "tracker REST".to_string();
    match client.get_member("me").await {
        Ok(me) if me.slug == config.slug => Line {
            warn: false,
            ok: true,
            what,
            detail: format!("{} knows the token as @{} ({})", client.api_base(), me.slug, me.kind.as_str()),
        },
        Ok(me) => Line {
            warn: false,
            ok: false,
            what,
            detail: format!(
                "the token belongs to @{}, but agent.json says slug {:?}: set slug to {:?} or use the agent's token",
                me.slug, config.slug, me.slug
            ),
        },
        Err(error) => Line {
            warn: false,
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
        Err(error) => return Line { warn: false, ok: false, what, detail: error.to_string() },
    };
    match crate::llm::probe::probe(&config.llm, key).await {
        Ok(detail) => Line { warn: false, ok: true, what, detail },
        Err(error) => Line { warn: false, ok: false, what, detail: error.to_string() },
    }
}

/// What the server says about itself at `/props` (llama.cpp's server): whether its chat template
/// takes tools, and whether its context holds `llm.context_tokens`. Servers without it: no lines.
/// `jinja_off`: the server refused the tool-call probe for want of `--jinja`.
async fn check_server(config: &Config, jinja_off: bool) -> Vec<Line> {
    let key = config.llm.api_key().ok().flatten();
    let Some(props) = crate::llm::probe::server_props(&config.llm, key).await else { return Vec::new() };
    let build = props.build.as_deref().map(|b| format!(" ({b})")).unwrap_or_default();
    let mut lines = Vec::new();
    if let Some(supports) = props.supports_tools {
        // `--jinja` is advised only to a server that said it lacks it: it is llama-server's
        // default, and most servers that drop tools run with it and a template without tools.
        let (ok, detail) = match (supports, jinja_off) {
            (true, false) => (true, format!("the server{build} says its chat template takes tools")),
            (true, true) => (
                false,
                format!(
                    "the server{build} says its chat template takes tools, but it was started with --no-jinja and \
                     refuses every request that carries tools: start llama-server with --jinja"
                ),
            ),
            (false, jinja_off) => (
                false,
                format!(
                    "the server{build} says its chat template does not take tools: it drops the tools picogent \
                     sends, and the model can only write text. Start llama-server with {}a tool-capable \
                     --chat-template-file (see docs/llm.md)",
                    if jinja_off { "--jinja and " } else { "" }
                ),
            ),
        };
        lines.push(Line { warn: false, ok, what: "server tools".into(), detail });
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
                warn: false,
                ok: true,
                what: "server context".into(),
                detail: format!("{context} tokens per request, llm.context_tokens is {configured}{slots}"),
            }
        } else {
            Line {
                warn: false,
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
/// configured parameters? Also says whether the server refused it for want of `--jinja`.
async fn check_tool_call(config: &Config) -> (Line, bool) {
    let what = "model tool call".to_string();
    let key = match config.llm.api_key() {
        Ok(key) => key,
        Err(error) => return (Line { warn: false, ok: false, what, detail: error.to_string() }, false),
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
            let line = Line {
                warn: false,
                ok: probe.called_tool && refused.is_none(),
                what,
                detail: format!("{called}{}", refused.unwrap_or_default()),
            };
            (line, false)
        }
        Err(error) if wants_jinja(&error) => {
            let detail = format!("{error}: llama-server takes tools only with --jinja; start it with --jinja");
            (Line { warn: false, ok: false, what, detail }, true)
        }
        Err(error) => (Line { warn: false, ok: false, what, detail: error.to_string() }, false),
    }
}

/// Whether the server's prompt cache is active: the same request twice, and whether the second
/// read its prefix from the cache. Informative, not a failure: a server without a cache works,
/// at full price.
async fn check_cache(config: &Config) -> Line {
    use crate::config::Api;
    let what = "prompt cache".to_string();
    let key = match config.llm.api_key() {
        Ok(key) => key,
        Err(error) => return Line { warn: false, ok: false, what, detail: error.to_string() },
    };
    let api = config.llm.api.as_str();
    match crate::llm::probe::probe_cache(&config.llm, key).await {
        Ok(probe) if probe.active() => Line {
            warn: false,
            ok: true,
            what,
            detail: format!(
                "active ({api} API): the second of two identical requests read {} of its {} prompt tokens from the cache",
                probe.cached_tokens, probe.prompt_tokens
            ),
        },
        Ok(probe) => {
            let why = match (config.llm.api, config.llm.prompt_cache) {
                (Api::Anthropic, false) => "llm.prompt_cache is false, so no cache_control is sent; set it to true",
                (Api::Anthropic, true) => "the server did not read the marked prefix from its cache",
                (Api::Openai, _) => {
                    "the server reported no cached tokens (it may not cache, or not say so); with a Claude model, \
                     set llm.api to \"anthropic\""
                }
            };
            Line {
                warn: false,
                ok: true,
                what,
                detail: format!(
                    "not active ({api} API): the second of two identical requests read none of its {} prompt tokens \
                     from the cache: {why}",
                    probe.prompt_tokens
                ),
            }
        }
        Err(error) => Line { warn: false, ok: false, what, detail: error.to_string() },
    }
}

/// llama-server's answer to a request with tools when it was started with `--no-jinja`: a fixed
/// text ("tools param requires --jinja flag"), the one place it says so.
fn wants_jinja(error: &crate::llm::LlmError) -> bool {
    use crate::llm::LlmError;
    match error {
        LlmError::Server { message, .. }
        | LlmError::Rejected { message, .. }
        | LlmError::Unprocessable { message, .. }
        | LlmError::ToolsUnsupported { message }
        | LlmError::ParameterRefused { message, .. } => message.contains("requires --jinja"),
        _ => false,
    }
}

/// The folder of `state.path` exists and this user may write in it (the state file, its `-wal`
/// and its `.lock` go there, and external tools' artifacts), and the state file, if there is
/// one, may be written. A folder that is missing fails, though `picogent run` would make it: a
/// mistyped path would otherwise start the agent afresh on a new, empty state.
/// One line per coding agent that would run without the sandbox: its entry says so, or bwrap is
/// not installed.
fn check_sandbox(config: &Config) -> Vec<Line> {
    use crate::workspace::config::Sandboxing;
    if !config.workspaces.enabled() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    for name in config.workspaces.agents.keys() {
        let Ok(agent) = config.workspaces.coding_agent(Some(name)) else { continue };
        let why = match agent.sandbox {
            Sandboxing::Off => Some(format!("its entry says `sandbox: false` (workspaces.agents.{name}.sandbox)")),
            Sandboxing::On | Sandboxing::WhereInstalled if !crate::workspace::sandbox::available() => {
                Some("bwrap is not installed (Debian: apt-get install bubblewrap)".to_string())
            }
            _ => None,
        };
        let (warn, ok, detail) = match (why, agent.sandbox) {
            (None, _) => (false, true, format!("coding agent `{name}` runs in the sandbox (bubblewrap)")),
            (Some(why), Sandboxing::On) => {
                (false, false, format!("coding agent `{name}` asks for the sandbox, and {why}"))
            }
            (Some(why), _) => (
                true,
                true,
                format!(
                    "coding agent `{name}` runs WITHOUT the sandbox: {why}; it can read what picogent's user can \
                     (docs/coding-agents.md, threat model)"
                ),
            ),
        };
        lines.push(Line { warn, ok, what: "sandbox".into(), detail });
    }
    lines
}

/// How long `<program> --version` may take before the check gives up on it.
const VERSION_TIMEOUT: Duration = Duration::from_secs(15);

/// One line per coding agent: its program is installed (on `PATH`, or at the path its command
/// names) and which version it says it is, and the model endpoint it will be pointed at speaks
/// what its preset speaks. A program that is missing, or a preset pointed at `llm.base_url` when
/// that speaks another API, fails: its first run would. (picogent's own client speaks chat
/// completions or the Messages API, never Google's Gemini API nor OpenAI's Responses API: a
/// `gemini-cli` or `codex` entry needs a `base_url` of its own.)
async fn check_coding_agents(config: &Config) -> Vec<Line> {
    use crate::config::Api;
    use crate::workspace::config::presets::ModelApi;
    if !config.workspaces.enabled() {
        return Vec::new();
    }
    let mut lines = Vec::new();
    for name in config.workspaces.agents.keys() {
        let what = "coding agent".to_string();
        let agent = match config.workspaces.coding_agent(Some(name)) {
            Ok(agent) => agent,
            Err(error) => {
                lines.push(Line { warn: false, ok: false, what, detail: format!("`{name}`: {error}") });
                continue;
            }
        };
        let own = match config.llm.api {
            Api::Openai => ModelApi::OpenAiChat,
            Api::Anthropic => ModelApi::AnthropicMessages,
        };
        if let Some(preset) = agent.preset
            && agent.base_url.is_none()
            && preset.speaks() != own
        {
            let detail = format!(
                "`{name}` ({}) speaks {}, and would be pointed at llm.base_url, which speaks {} (llm.api): set \
                 workspaces.agents.{name}.base_url to an endpoint that speaks {} (docs/coding-agents.md)",
                preset.name(),
                preset.speaks().words(),
                own.words(),
                preset.speaks().words()
            );
            lines.push(Line { warn: false, ok: false, what, detail });
            continue;
        }
        let program = agent.command.first().cloned().unwrap_or_default();
        lines.push(match program_version(&program).await {
            Some((path, version)) => {
                Line { warn: false, ok: true, what, detail: format!("`{name}`: {version} ({})", path.display()) }
            }
            None => Line {
                warn: false,
                ok: false,
                what,
                detail: format!(
                    "`{name}`: its program `{program}` is not installed (not on PATH): install it \
                     (docs/coding-agents.md)"
                ),
            },
        });
    }
    lines
}

/// Where `program` is and the first line of what `<program> --version` prints (or why it says
/// nothing), run with nothing of picogent's environment but `PATH`, in a home of its own; `None`
/// when it is not installed.
async fn program_version(program: &str) -> Option<(std::path::PathBuf, String)> {
    let found = if program.contains('/') {
        Some(std::path::PathBuf::from(program)).filter(|path| path.is_file())
    } else {
        std::env::var_os("PATH")
            .map(|paths| std::env::split_paths(&paths).map(|folder| folder.join(program)).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .find(|path| path.is_file())
    };
    let path = found?;
    let mut command = tokio::process::Command::new(&path);
    command.arg("--version").env_clear().stdin(std::process::Stdio::null()).kill_on_drop(true);
    if let Some(paths) = std::env::var_os("PATH") {
        command.env("PATH", paths);
    }
    // A home of its own, gone after: a CLI that writes its settings at start writes nothing into
    // the operator's.
    let home = tempfile::tempdir().ok();
    if let Some(home) = &home {
        command.env("HOME", home.path());
    }
    let version = match tokio::time::timeout(VERSION_TIMEOUT, command.output()).await {
        Ok(Ok(output)) => {
            let text = [output.stdout, output.stderr].concat();
            let text = String::from_utf8_lossy(&text);
            match text.lines().map(str::trim).find(|line| !line.is_empty()) {
                Some(line) => crate::prompts::clean_text(line, 120),
                None => format!("`{program} --version` printed nothing"),
            }
        }
        Ok(Err(error)) => format!("`{program} --version` did not run: {error}"),
        Err(_) => format!("`{program} --version` did not answer within {} s", VERSION_TIMEOUT.as_secs()),
    };
    Some((path, version))
}

/// With workspaces on: git is there, and new enough to ignore the attributes a coding agent writes
/// (`GIT_ATTR_SOURCE`); an older git still works, with that one guard missing (WARN).
fn check_git(config: &Config) -> Option<Line> {
    use crate::workspace::git::{MIN_VERSION, version};
    if !config.workspaces.enabled() {
        return None;
    }
    let what = "git".to_string();
    Some(match version() {
        Ok((found, line)) if found >= MIN_VERSION => {
            Line { warn: false, ok: true, what, detail: format!("{line}, for the workspaces") }
        }
        Ok((_, line)) => Line {
            warn: true,
            ok: true,
            what,
            detail: format!(
                "{line} is older than {}.{}: picogent's git would read the attributes (.gitattributes) a coding \
                 agent writes; install git {}.{} or later (docs/coding-agents.md, threat model)",
                MIN_VERSION.0, MIN_VERSION.1, MIN_VERSION.0, MIN_VERSION.1
            ),
        },
        Err(error) => Line { warn: false, ok: false, what, detail: format!("the workspaces need git: {error}") },
    })
}

fn check_state_folder(config: &Config) -> Line {
    let what = "state".to_string();
    let fail = |detail: String| Line { warn: false, ok: false, what: what.clone(), detail };
    let folder = config.state.folder();
    let path = &config.state.path;
    match std::fs::metadata(folder) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return fail(format!("{} (the folder of state.path) is not a folder", folder.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return fail(format!(
                "the state folder {} does not exist: create it (mkdir -p {}; picogent run also makes it when it \
                 starts), or set state.path to a file in another folder",
                folder.display(),
                folder.display()
            ));
        }
        Err(error) => return fail(format!("cannot read the state folder {}: {error}", folder.display())),
    }
    if let Err(error) = tempfile::Builder::new().prefix(".picogent-check-").tempfile_in(folder) {
        return fail(format!(
            "cannot write in the state folder {} ({error}): give this user write access to it, or set state.path \
             to a file in a folder it may write",
            folder.display()
        ));
    }
    if path.exists()
        && let Err(error) = std::fs::OpenOptions::new().write(true).open(path)
    {
        return fail(format!(
            "cannot write the state file {} ({error}): give this user write access to it",
            path.display()
        ));
    }
    let detail = match &config.state.postgres_url {
        Some(_) => {
            format!("the state is in PostgreSQL (state.url); {} is writable, for tools' artifacts", folder.display())
        }
        None if path.exists() => format!("{} can be written", path.display()),
        None => format!("{} can be made in {} (a first start)", path.display(), folder.display()),
    };
    Line { warn: false, ok: true, what, detail }
}
