//! Ready-made coding agent entries for CLIs that install from the package registries, tried for
//! real (`docs/coding-agents.md` says with which versions and what each needs):
//!
//! - `qwen-code`: Qwen Code (`@qwen-code/qwen-code` from npm), headless with `--yolo`, its
//!   output as stream-json lines; telemetry and its memory extraction turned off in the settings
//!   file written into its home;
//! - `mini-swe-agent`: mini-swe-agent (`mini-swe-agent` from PyPI), its only tool `bash`, the
//!   outcome read from the trajectory file it writes;
//! - `claude-code`: Claude Code (`@anthropic-ai/claude-code` from npm), headless (`-p`) with its
//!   permission prompts off, its output as stream-json lines, told the endpoint's root
//!   (`{api_root}`: it calls `/v1/messages` under it) and no traffic but the model's;
//! - `gemini-cli`: Gemini CLI (`@google/gemini-cli` from npm), headless (`--prompt=…`) with
//!   `--approval-mode=yolo`, its output as stream-json lines, told the endpoint's root
//!   (`{api_root}`: it calls `/v1beta/models/{model}:streamGenerateContent` under it), its
//!   settings (the API key's auth, no telemetry, usage statistics or updates) written into its
//!   home's `.gemini/settings.json`.
//! - `codex`: Codex CLI (`@openai/codex` from npm), `codex exec` with its events as JSON lines,
//!   its approvals and its own sandbox off, told the endpoint (`{base_url}`, on the Responses API)
//!   as a model provider of its own through `-c` overrides, its home (`CODEX_HOME`) the agent's.
//! - `opencode`: OpenCode (`opencode-ai` from npm), `opencode run` with its events as JSON lines,
//!   told the endpoint (`{base_url}`, on chat completions) as a provider of its own in the
//!   configuration it is given inline (`OPENCODE_CONFIG_CONTENT`), every permission allowed, its
//!   configuration, data, cache and state in the agent's home, and nothing fetched at start.
//!
//! Task text is never an option: it is joined to its option (`--prompt=…`, `--task=…`), or comes
//! after `--`, so text that starts with `-` is still the task.
//!
//! Each is told the model's endpoint and name (`{base_url}` or `{api_root}`, `{model}`), and gets
//! a key only from `${CODING_AGENT_API_KEY}` in picogent's environment (a placeholder when it is
//! unset: a local server takes any). Each speaks one model API ([`ModelApi`]); `picogent check`
//! fails one pointed at picogent's own endpoint when that speaks another.

use std::collections::BTreeMap;

use super::{OutputFormat, ResultFile};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preset {
    QwenCode,
    MiniSweAgent,
    ClaudeCode,
    GeminiCli,
    Codex,
    OpenCode,
}

/// The model API a preset's CLI calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelApi {
    /// `{base_url}/chat/completions`.
    OpenAiChat,
    /// `{api_root}/v1/messages`.
    AnthropicMessages,
    /// `{api_root}/v1beta/models/{model}:generateContent`.
    GoogleGenerateContent,
    /// `{base_url}/responses`: OpenAI's Responses API, which picogent's own client does not
    /// speak (an endpoint that serves it may serve chat completions too, or not).
    OpenAiResponses,
}

impl ModelApi {
    pub fn words(self) -> &'static str {
        match self {
            ModelApi::OpenAiChat => "OpenAI's chat completions",
            ModelApi::AnthropicMessages => "Anthropic's Messages API",
            ModelApi::GoogleGenerateContent => "Google's Gemini API",
            ModelApi::OpenAiResponses => "OpenAI's Responses API",
        }
    }
}

/// Qwen Code's settings: no usage statistics or telemetry (it would look up a host at start),
/// no memory extraction (a second model request after every answer).
const QWEN_SETTINGS: &str = r#"{"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},"memory":{"enableManagedAutoMemory":false}}"#;

/// Gemini CLI's settings: the API key's auth (with `GOOGLE_GEMINI_BASE_URL` set it would pick its
/// `gateway` auth, which it refuses headless), folder trust off (the workspace is the task's),
/// no telemetry, usage statistics or update checks. It reads them from its home's
/// `.gemini/settings.json`: a system settings file (`GEMINI_CLI_SYSTEM_SETTINGS_PATH`) it skips
/// when a folder above it is writable by others, as `/tmp` is.
const GEMINI_SETTINGS: &str = r#"{"security":{"auth":{"selectedType":"gemini-api-key"},"folderTrust":{"enabled":false}},"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false},"general":{"enableAutoUpdate":false,"enableAutoUpdateNotification":false}}"#;

/// OpenCode's configuration, given inline: the endpoint a provider of its own (`picogent`, through
/// the `@ai-sdk/openai-compatible` provider its binary carries: nothing is installed at start),
/// its key read from `OPENAI_API_KEY` by OpenCode's own `{env:…}` (never written into the text),
/// the model its small model too (no other provider's), every permission allowed (what it may
/// reach is the workspace's boundary's to decide, not a prompt nobody answers), no sharing, auto
/// update, snapshots (picogent commits the work), language servers or formatters.
const OPENCODE_CONFIG: &str = r#"{"provider":{"picogent":{"npm":"@ai-sdk/openai-compatible","name":"picogent","options":{"baseURL":"{base_url}","apiKey":"{env:OPENAI_API_KEY}"},"models":{"{model}":{"name":"{model}"}}}},"enabled_providers":["picogent"],"model":"picogent/{model}","small_model":"picogent/{model}","permission":"allow","share":"disabled","autoupdate":false,"snapshot":false,"lsp":false,"formatter":false}"#;

const KEY: &str = "${CODING_AGENT_API_KEY:-not-needed}";

impl Preset {
    pub const NAMES: [&'static str; 6] =
        ["\"qwen-code\"", "\"mini-swe-agent\"", "\"claude-code\"", "\"gemini-cli\"", "\"codex\"", "\"opencode\""];

    /// Its name in `agent.json`.
    pub fn name(self) -> &'static str {
        match self {
            Preset::QwenCode => "qwen-code",
            Preset::MiniSweAgent => "mini-swe-agent",
            Preset::ClaudeCode => "claude-code",
            Preset::GeminiCli => "gemini-cli",
            Preset::Codex => "codex",
            Preset::OpenCode => "opencode",
        }
    }

    /// The model API it calls (`picogent check` refuses one pointed at an endpoint that speaks
    /// another).
    pub fn speaks(self) -> ModelApi {
        match self {
            Preset::QwenCode | Preset::MiniSweAgent | Preset::OpenCode => ModelApi::OpenAiChat,
            Preset::ClaudeCode => ModelApi::AnthropicMessages,
            Preset::GeminiCli => ModelApi::GoogleGenerateContent,
            Preset::Codex => ModelApi::OpenAiResponses,
        }
    }

    pub fn named(word: &str) -> Option<Preset> {
        match word {
            "qwen-code" => Some(Preset::QwenCode),
            "mini-swe-agent" => Some(Preset::MiniSweAgent),
            "claude-code" => Some(Preset::ClaudeCode),
            "gemini-cli" => Some(Preset::GeminiCli),
            "codex" => Some(Preset::Codex),
            "opencode" => Some(Preset::OpenCode),
            _ => None,
        }
    }

    pub fn command(self) -> Vec<String> {
        let words: &[&str] = match self {
            // `--prompt=` in one argument: task text starting with `-` stays the prompt (Qwen Code
            // takes no positional prompt after `--`).
            Preset::QwenCode => {
                &["qwen", "--auth-type", "openai", "--yolo", "-o", "stream-json", "--prompt={instructions}"]
            }
            Preset::MiniSweAgent => &[
                "mini",
                "-m",
                "openai/{model}",
                "-y",
                "--exit-immediately",
                "-o",
                "{home}/trajectory.json",
                "-c",
                "mini.yaml",
                "-c",
                "model.model_kwargs.api_base={base_url}",
                "--task={instructions}",
            ],
            // The task after `--`: Claude Code takes its prompt as the one positional argument.
            // Its permission prompts are off (`--dangerously-skip-permissions`, which it allows
            // as root only with `IS_SANDBOX=1`): what it may reach is the workspace's boundary's
            // to decide, not a prompt nobody answers.
            Preset::ClaudeCode => &[
                "claude",
                "-p",
                "--output-format",
                "stream-json",
                "--verbose",
                "--dangerously-skip-permissions",
                "--model",
                "{model}",
                "--",
                "{instructions}",
            ],
            // `--prompt=` in one argument, as for Qwen Code: text starting with `-` stays the
            // prompt. Its approval prompts are off (`yolo`): what it may reach is the workspace's
            // boundary's to decide.
            Preset::GeminiCli => &[
                "gemini",
                "--approval-mode=yolo",
                "--output-format",
                "stream-json",
                "--model",
                "{model}",
                "--prompt={instructions}",
            ],
            // The task after `--`: `codex exec` takes its prompt as the one positional argument.
            // The endpoint is a model provider of its own (Codex 0.171 speaks only the Responses
            // API to it, `wire_api = "responses"`), its key read from `OPENAI_API_KEY`. Analytics,
            // feedback and the update check are off, and so are plugins and apps (otherwise it
            // runs `git ls-remote` on its plugin marketplace at start). Its approvals and its own
            // sandbox are off (`--dangerously-bypass-approvals-and-sandbox`): picogent's sandbox is
            // the boundary, and Codex's own cannot start inside it (docs/coding-agents.md).
            Preset::Codex => &[
                "codex",
                "exec",
                "--json",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                "--model",
                "{model}",
                "-c",
                "model_provider=\"picogent\"",
                "-c",
                "model_providers.picogent.name=\"picogent\"",
                "-c",
                "model_providers.picogent.base_url=\"{base_url}\"",
                "-c",
                "model_providers.picogent.wire_api=\"responses\"",
                "-c",
                "model_providers.picogent.env_key=\"OPENAI_API_KEY\"",
                "-c",
                "analytics.enabled=false",
                "-c",
                "feedback.enabled=false",
                "-c",
                "check_for_update_on_startup=false",
                "-c",
                "features.plugins=false",
                "-c",
                "features.remote_plugin=false",
                "-c",
                "features.apps=false",
                "--",
                "{instructions}",
            ],
            // The task after `--`: `opencode run` takes its message as its positional arguments
            // (it quotes one that holds a space). The session's title given (the task's key), so
            // it asks the model for none: one request less per run.
            Preset::OpenCode => &[
                "opencode",
                "run",
                "--format",
                "json",
                "--model",
                "picogent/{model}",
                "--title={task_key}",
                "--",
                "{instructions}",
            ],
        };
        words.iter().map(|word| word.to_string()).collect()
    }

    pub fn env(self) -> BTreeMap<String, String> {
        let pairs: &[(&str, &str)] = match self {
            Preset::QwenCode => &[
                ("OPENAI_BASE_URL", "{base_url}"),
                ("OPENAI_MODEL", "{model}"),
                ("OPENAI_API_KEY", KEY),
                ("QWEN_CODE_SYSTEM_SETTINGS_PATH", "{home}/qwen-settings.json"),
                ("QWEN_CODE_SUPPRESS_YOLO_WARNING", "1"),
            ],
            Preset::MiniSweAgent => &[
                ("OPENAI_API_KEY", KEY),
                ("MSWEA_CONFIGURED", "true"),
                ("MSWEA_SILENT_STARTUP", "1"),
                ("MSWEA_COST_TRACKING", "ignore_errors"),
                ("MSWEA_GLOBAL_CONFIG_DIR", "{home}/mini-swe-agent"),
                ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
            ],
            Preset::ClaudeCode => &[
                ("ANTHROPIC_BASE_URL", "{api_root}"),
                ("ANTHROPIC_API_KEY", KEY),
                // Its small model's requests, if it makes any, go to the same model.
                ("ANTHROPIC_SMALL_FAST_MODEL", "{model}"),
                ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "{model}"),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
                ("DISABLE_AUTOUPDATER", "1"),
                ("DISABLE_TELEMETRY", "1"),
                ("DISABLE_ERROR_REPORTING", "1"),
                ("IS_SANDBOX", "1"),
            ],
            Preset::GeminiCli => &[
                ("GOOGLE_GEMINI_BASE_URL", "{api_root}"),
                ("GEMINI_API_KEY", KEY),
                // Its settings and sessions in the home picogent made for it.
                ("GEMINI_CLI_HOME", "{home}"),
                ("GEMINI_CLI_TRUST_WORKSPACE", "true"),
                ("GEMINI_TELEMETRY_ENABLED", "false"),
                // One process: no second Node started with a larger heap.
                ("GEMINI_CLI_NO_RELAUNCH", "true"),
            ],
            // Its home (settings, sessions, logs) is the agent's, never the operator's `~/.codex`.
            Preset::Codex => &[("CODEX_HOME", "{home}"), ("OPENAI_API_KEY", KEY)],
            Preset::OpenCode => &[
                ("OPENCODE_CONFIG_CONTENT", OPENCODE_CONFIG),
                ("OPENAI_API_KEY", KEY),
                // Its configuration, sessions, logs and cache in the agent's home, never the
                // operator's `~/.config/opencode` or `~/.local/share/opencode`.
                ("XDG_CONFIG_HOME", "{home}/.config"),
                ("XDG_DATA_HOME", "{home}/.local/share"),
                ("XDG_CACHE_HOME", "{home}/.cache"),
                ("XDG_STATE_HOME", "{home}/.local/state"),
                // Nothing fetched at start: no models.dev catalogue, update, language servers or
                // default plugins; no sharing.
                ("OPENCODE_DISABLE_MODELS_FETCH", "1"),
                ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
                ("OPENCODE_DISABLE_LSP_DOWNLOAD", "1"),
                ("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1"),
                ("OPENCODE_DISABLE_SHARE", "1"),
                // The task's repository is not its configuration: an `opencode.json` in it cannot
                // point OpenCode at another model or add plugins.
                ("OPENCODE_DISABLE_PROJECT_CONFIG", "1"),
            ],
        };
        pairs.iter().map(|(key, value)| (key.to_string(), value.to_string())).collect()
    }

    pub fn files(self) -> BTreeMap<String, String> {
        match self {
            Preset::QwenCode => BTreeMap::from([("qwen-settings.json".to_string(), QWEN_SETTINGS.to_string())]),
            Preset::GeminiCli => BTreeMap::from([(".gemini/settings.json".to_string(), GEMINI_SETTINGS.to_string())]),
            Preset::MiniSweAgent | Preset::ClaudeCode | Preset::Codex | Preset::OpenCode => BTreeMap::new(),
        }
    }

    pub fn output(self) -> OutputFormat {
        match self {
            Preset::QwenCode | Preset::ClaudeCode | Preset::GeminiCli | Preset::Codex | Preset::OpenCode => {
                OutputFormat::Jsonl
            }
            Preset::MiniSweAgent => OutputFormat::Text,
        }
    }

    /// Where the CLI writes its outcome, when its exit code does not tell (mini-swe-agent exits 0
    /// past its step limit too): the file, the JSON pointer in it, and the values that mean done.
    pub fn result(self) -> Option<ResultFile> {
        match self {
            Preset::QwenCode | Preset::ClaudeCode | Preset::GeminiCli | Preset::Codex | Preset::OpenCode => None,
            Preset::MiniSweAgent => Some(ResultFile {
                path: "{home}/trajectory.json".to_string(),
                pointer: "/info/exit_status".to_string(),
                done: vec!["Submitted".to_string()],
            }),
        }
    }
}
