use super::*;

fn write(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("agent.json");
    std::fs::write(&path, text).unwrap();
    path
}

const MINIMAL: &str = r#"{
    "slug": "picogent", "name": "Picogent",
    "tracker": {"url": "http://127.0.0.1:8700"},
    "llm": {"base_url": "http://127.0.0.1:8790/v1", "model": "offline-planner"}
}"#;

#[test]
fn loads_a_minimal_file_with_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), []).unwrap();
    assert_eq!(config.slug, "picogent");
    assert_eq!(config.limits.max_turns, 12);
    assert_eq!(config.tracker.api_base(), "http://127.0.0.1:8700/api");
    assert_eq!(config.chat_listen, ChatListen::Mentions);
    assert_eq!(config.prompts_dir, dir.path().join("prompts"));
}

#[test]
fn environment_overrides_nested_fields() {
    let dir = tempfile::tempdir().unwrap();
    let vars = [
        ("PICOGENT_LIMITS__MAX_TURNS".to_string(), "3".to_string()),
        ("PICOGENT_TRACKER__URL".to_string(), "http://10.0.0.1:9".to_string()),
        ("OTHER".to_string(), "x".to_string()),
    ];
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap();
    assert_eq!(config.limits.max_turns, 3);
    assert_eq!(config.tracker.url, "http://10.0.0.1:9");
}

#[test]
fn secret_variables_are_not_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let vars = [
        ("PICOGENT_MCP_TOKEN".to_string(), "tok-mcp".to_string()),
        ("PICOGENT_MCP__ALLOWED_HOSTS".to_string(), "agent.example.com,other.example.com".to_string()),
    ];
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap();
    assert_eq!(config.mcp.token_env, "PICOGENT_MCP_TOKEN");
    assert_eq!(config.mcp.allowed_hosts, vec!["agent.example.com", "other.example.com"]);
    assert!(config.mcp.allowed_origins.is_empty());
}

#[test]
fn the_inspector_token_variable_is_named_not_an_override() {
    let dir = tempfile::tempdir().unwrap();
    let vars = [("PICOGENT_UI_TOKEN".to_string(), "tok-ui".to_string())];
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap();
    assert_eq!(config.http.ui_token_env, "PICOGENT_UI_TOKEN");
    let text = MINIMAL.replace("\"name\"", "\"http\": {\"ui_token_env\": \"MY_UI\"}, \"name\"");
    let vars = [("MY_UI".to_string(), "tok-ui".to_string())];
    assert_eq!(Config::load_with_env(&write(dir.path(), &text), vars).unwrap().http.ui_token_env, "MY_UI");
    let text = MINIMAL.replace("\"name\"", "\"http\": {\"ui_token_env\": \" \"}, \"name\"");
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("http.ui_token_env"), "{error}");
}

#[test]
fn unknown_field_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL.replace("\"name\"", "\"nmae\": 1, \"name\"");
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("nmae"), "{error}");
    assert!(error.contains("agent.json"), "{error}");
}

#[test]
fn wrong_type_names_field_and_expectation() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL.replace("\"slug\"", "\"limits\": {\"max_turns\": \"many\"}, \"slug\"");
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("max_turns"), "{error}");
}

#[test]
fn bad_value_names_field() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL.replace("http://127.0.0.1:8700", "ftp://x");
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("tracker.url"), "{error}");
}

#[test]
fn bad_enum_value_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL.replace("\"slug\"", "\"chat_listen\": \"sometimes\", \"slug\"");
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("sometimes") && error.contains("\"mentions\", \"all\", \"none\""), "{error}");
}

#[test]
fn missing_file_names_it() {
    let error = Config::load_with_env(Path::new("/nonexistent/agent.json"), []).unwrap_err().to_string();
    assert!(error.contains("/nonexistent/agent.json"), "{error}");
}

#[test]
fn mcp_servers_and_permissions_load_with_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL.replace(
        "\"slug\"",
        r#""mcp_servers": {
            "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"], "cwd": "servers"},
            "gh": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
                   "trusted": true, "tools": {"disallowed": ["delete_*"]}}
        },
        "permissions": {"mode": "ask", "disallowed_tools": ["mcp__gh__*"]},
        "slug""#,
    );
    let config = Config::load_with_env(&write(dir.path(), &text), []).unwrap();
    let time = &config.mcp_servers["time"];
    assert_eq!(time.timeout_ms, 60_000);
    assert_eq!(time.cwd.as_deref(), Some(dir.path().join("servers").as_path()));
    assert!(!time.trusted);
    let gh = &config.mcp_servers["gh"];
    assert_eq!(gh.headers["Authorization"], "Bearer ${GITHUB_TOKEN}");
    assert_eq!(gh.tools.disallowed, vec!["delete_*".to_string()]);
    assert_eq!(config.permissions.mode, PermissionMode::Ask);
    assert_eq!(config.permissions.ask_timeout_ms, 300_000);
}

#[test]
fn an_mcp_server_needs_exactly_one_transport() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL
        .replace("\"slug\"", r#""mcp_servers": {"both": {"command": "x", "url": "http://127.0.0.1:1/mcp"}}, "slug""#);
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("mcp_servers.both"), "{error}");
}

#[test]
fn the_round_limit_in_the_review_section_names_where_it_moved() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL.replace("\"slug\"", r#""review": {"max_review_rounds": 3}, "slug""#);
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("review.max_review_rounds") && error.contains("`delegation.max_review_rounds`"), "{error}");
    let text = MINIMAL.replace("\"slug\"", r#""delegation": {"max_review_rounds": 3}, "slug""#);
    let config = Config::load_with_env(&write(dir.path(), &text), []).unwrap();
    assert_eq!(config.review().max_review_rounds, 3);
}

#[test]
fn the_old_tools_section_names_what_to_rename() {
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL.replace("\"slug\"", r#""tools": {"allowed": ["get_*"], "disallowed": []}, "slug""#);
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("agent.json"), "{error}");
    assert!(error.contains("`tools.allowed` to `permissions.allowed_tools`"), "{error}");
    assert!(error.contains("`tools.disallowed` to `permissions.disallowed_tools`"), "{error}");
    // The same from an override, and the new section loads.
    let vars = [("PICOGENT_TOOLS__DISALLOWED".to_string(), "take_task".to_string())];
    let error = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap_err().to_string();
    assert!(error.contains("permissions.disallowed_tools"), "{error}");
    let vars = [("PICOGENT_PERMISSIONS__DISALLOWED_TOOLS".to_string(), "take_task,*_file".to_string())];
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap();
    assert_eq!(config.permissions.disallowed_tools, vec!["take_task", "*_file"]);
}

#[test]
fn the_shipped_agent_json_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../agent.json");
    Config::load_with_env(&path, []).unwrap();
}

#[test]
fn list_overrides_take_a_json_array_or_a_comma_list() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), MINIMAL);
    let load = |value: &str| Config::load_with_env(&path, [("PICOGENT_ALLOWED_BOTS".to_string(), value.to_string())]);
    for value in [r#"["otherbot", "friendbot"]"#, "otherbot,friendbot", " otherbot , friendbot "] {
        assert_eq!(load(value).unwrap().allowed_bots, ["otherbot", "friendbot"], "{value}");
    }
    assert_eq!(load(r#"["otherbot"]"#).unwrap().allowed_bots, ["otherbot"]);
    for value in [r#"["otherbot""#, r#"[1, 2]"#, r#""otherbot""#, "a,,b"] {
        let error = load(value).unwrap_err().to_string();
        assert!(error.contains("PICOGENT_ALLOWED_BOTS") && error.contains("JSON array"), "{value}: {error}");
    }
    let nested = [("PICOGENT_PERMISSIONS__DISALLOWED_TOOLS".to_string(), r#"["mcp__git__*"]"#.to_string())];
    assert_eq!(Config::load_with_env(&path, nested).unwrap().permissions.disallowed_tools, ["mcp__git__*"]);
}

#[test]
fn ask_tools_default_to_reassign_reject_and_close_and_can_be_emptied() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), []).unwrap();
    assert_eq!(config.permissions.ask_tools, ["update_task", "assign_task", "reject_task"]);
    let with = |permissions: &str| MINIMAL.replace("\"slug\"", &format!(r#""permissions": {permissions}, "slug""#));
    let empty = Config::load_with_env(&write(dir.path(), &with(r#"{"mode": "ask", "ask_tools": []}"#)), []).unwrap();
    assert_eq!(empty.permissions.ask_tools, Vec::<String>::new());
    assert_eq!(empty.permissions.ask_timeout_ms, 300_000, "the other fields keep their defaults");
    let globs = with(r#"{"ask_tools": ["mcp__git__*", "update_?ask", "read_mcp_resource"]}"#);
    let config = Config::load_with_env(&write(dir.path(), &globs), []).unwrap();
    assert_eq!(config.permissions.ask_tools, ["mcp__git__*", "update_?ask", "read_mcp_resource"]);
    let vars = [("PICOGENT_PERMISSIONS__ASK_TOOLS".to_string(), r#"["reject_task", "mcp__*"]"#.to_string())];
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap();
    assert_eq!(config.permissions.ask_tools, ["reject_task", "mcp__*"]);
    let vars = [("PICOGENT_PERMISSIONS__ASK_TOOLS".to_string(), "[]".to_string())];
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap();
    assert_eq!(config.permissions.ask_tools, Vec::<String>::new(), "an empty JSON array empties the list");
}

#[test]
fn delegation_loads_with_defaults_and_a_bad_bound_names_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), []).unwrap();
    assert_eq!(config.delegation, DelegationConfig::default());
    assert!(config.delegation.enabled && config.delegation.max_subtasks == 8 && config.delegation.max_depth == 1);
    let with = |delegation: &str| MINIMAL.replace("\"slug\"", &format!(r#""delegation": {delegation}, "slug""#));
    let config = Config::load_with_env(&write(dir.path(), &with(r#"{"max_subtasks": 3}"#)), []).unwrap();
    assert_eq!((config.delegation.max_subtasks, config.delegation.labels.clone()), (3, vec!["epic".to_string()]));
    let error = Config::load_with_env(&write(dir.path(), &with(r#"{"max_subtasks": 500}"#)), []).unwrap_err();
    assert!(error.to_string().contains("`delegation.max_subtasks`: expected a number of sub-tasks from 1 to 50"));
    let error = Config::load_with_env(&write(dir.path(), &with(r#"{"max_sub_tasks": 3}"#)), []).unwrap_err();
    assert!(error.to_string().contains("max_sub_tasks"), "{error}");
    let vars = [("PICOGENT_DELEGATION__LABELS".to_string(), "epic,breakdown".to_string())];
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap();
    assert_eq!(config.delegation.labels, ["epic", "breakdown"]);
}

#[test]
fn a_bad_glob_or_shape_in_the_tool_lists_is_an_error_saying_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let with = |permissions: &str| MINIMAL.replace("\"slug\"", &format!(r#""permissions": {permissions}, "slug""#));
    let cases = [
        (r#"{"ask_tools": ["update task"]}"#, "permissions.ask_tools", "' ' is not allowed"),
        (r#"{"ask_tools": ["mcp__git__[a-z]*"]}"#, "permissions.ask_tools", "globs add only `*`"),
        (r#"{"ask_tools": ["update_tasks"]}"#, "permissions.ask_tools", "no tool is named \"update_tasks\""),
        (r#"{"ask_tools": [""]}"#, "permissions.ask_tools", "not an empty one"),
        (r#"{"disallowed_tools": ["mcp.git.*"]}"#, "permissions.disallowed_tools", "'.' is not allowed"),
        (r#"{"allowed_tools": ["get-task"]}"#, "permissions.allowed_tools", "picogent tools list"),
    ];
    for (permissions, field, what) in cases {
        let error = Config::load_with_env(&write(dir.path(), &with(permissions)), []).unwrap_err().to_string();
        assert!(error.contains(&format!("field `{field}`")) && error.contains(what), "{permissions}: {error}");
    }
    // Not a list of names at all.
    for shape in [r#"{"ask_tools": "update_task"}"#, r#"{"ask_tools": {"update_task": "done"}}"#] {
        let error = Config::load_with_env(&write(dir.path(), &with(shape)), []).unwrap_err().to_string();
        assert!(
            error.contains("field `permissions.ask_tools`") && error.contains("expected a list"),
            "{shape}: {error}"
        );
    }
    let error = Config::load_with_env(&write(dir.path(), &with(r#"{"ask_tool": ["update_task"]}"#)), [])
        .unwrap_err()
        .to_string();
    assert!(error.contains("ask_tool"), "an unknown field is named: {error}");
}

#[test]
fn startup_mention_window_defaults_to_15_minutes_and_reads_units_seconds_and_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), []).unwrap();
    assert_eq!(config.startup.answer_mentions_since.0, std::time::Duration::from_secs(900));
    let with = |value: &str| {
        MINIMAL.replace("\"slug\"", &format!(r#""startup": {{"answer_mentions_since": {value}}}, "slug""#))
    };
    for (value, seconds) in [
        (r#""90s""#, 90),
        (r#""15m""#, 900),
        (r#""2h""#, 7_200),
        (r#""1d""#, 86_400),
        ("0", 0),
        ("45", 45),
        (r#""0""#, 0),
    ] {
        let config = Config::load_with_env(&write(dir.path(), &with(value)), []).unwrap();
        assert_eq!(config.startup.answer_mentions_since.0.as_secs(), seconds, "{value}");
    }
    // From the environment, as text or a number.
    for (value, seconds) in [("10m", 600), ("0", 0)] {
        let vars = [("PICOGENT_STARTUP__ANSWER_MENTIONS_SINCE".to_string(), value.to_string())];
        let config = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap();
        assert_eq!(config.startup.answer_mentions_since.0.as_secs(), seconds, "{value}");
    }
    // It survives being written back (the tests' child processes read a written config).
    let written = serde_json::to_value(&config).unwrap();
    assert_eq!(written["startup"]["answer_mentions_since"], "15m");
    let mut config = config;
    config.startup.answer_mentions_since = TextDuration(std::time::Duration::from_secs(5_400));
    let back: Config = serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
    assert_eq!(back.startup, config.startup);
    // A bad value names the field and says what is expected.
    for value in [r#""soon""#, r#""15 minutes""#, "-5", r#""m""#] {
        let error = Config::load_with_env(&write(dir.path(), &with(value)), []).unwrap_err().to_string();
        assert!(error.contains("answer_mentions_since") && error.contains("15m"), "{value}: {error}");
    }
    let error = Config::load_with_env(&write(dir.path(), &with(r#""5m", "since": 1"#)), []).unwrap_err().to_string();
    assert!(error.contains("since"), "{error}");
}

#[test]
fn retention_has_defaults_for_months_and_takes_small_values() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), []).unwrap();
    let day_ms = 24 * 60 * 60 * 1000;
    assert_eq!(config.retention.events_ms, 7 * day_ms);
    assert_eq!(config.retention.claims_ms, 30 * day_ms);
    assert_eq!(config.retention.runs_ms, 90 * day_ms);
    assert_eq!(config.retention.sessions_ms, 30 * day_ms);
    assert_eq!(config.retention.interval_ms, 60 * 60 * 1000);

    let text = MINIMAL
        .replace("\"slug\"", r#""retention": {"events_ms": 2000, "claims_ms": 3000, "interval_ms": 250}, "slug""#);
    let config = Config::load_with_env(&write(dir.path(), &text), []).unwrap();
    assert_eq!((config.retention.events_ms, config.retention.claims_ms), (2000, 3000));
    assert_eq!(config.retention.interval_ms, 250);
    assert_eq!(config.retention.runs_ms, 90 * day_ms, "a field left out keeps its default");
    let vars = [("PICOGENT_RETENTION__SESSIONS_MS".to_string(), "5000".to_string())];
    assert_eq!(Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap().retention.sessions_ms, 5000);
}

#[test]
fn bad_retention_names_the_field_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (r#"{"runs_ms": 0}"#, "retention.runs_ms", "greater than 0"),
        (r#"{"interval_ms": 0}"#, "retention.interval_ms", "greater than 0"),
        (r#"{"events_ms": 5000, "claims_ms": 1000}"#, "retention.claims_ms", "at least retention.events_ms"),
        (r#"{"events_days": 7}"#, "events_days", "unknown field"),
        (r#"{"events_ms": -1}"#, "events_ms", ""),
    ];
    for (retention, field, says) in cases {
        let text = MINIMAL.replace("\"slug\"", &format!(r#""retention": {retention}, "slug""#));
        let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
        assert!(error.contains(field) && error.contains(says), "{retention}: {error}");
    }
}

#[test]
fn state_is_a_sqlite_path_by_default_or_postgres_through_state_url() {
    let dir = tempfile::tempdir().unwrap();
    let with = |state: &str| MINIMAL.replace("\"slug\"", &format!(r#""state": {state}, "slug""#));
    let load = |text: &str| Config::load_with_env(&write(dir.path(), text), []).map(|config| config.state);
    let default = load(MINIMAL).unwrap();
    assert_eq!((default.path.as_path(), default.postgres_url.as_deref()), (Path::new("./picogent.db"), None));
    for (state, path) in [
        (r#"{"path": "/var/lib/picogent/agent.db"}"#, "/var/lib/picogent/agent.db"),
        (r#"{"url": "sqlite:/var/lib/picogent/agent.db"}"#, "/var/lib/picogent/agent.db"),
        (r#"{"url": "sqlite://state/agent.db"}"#, "state/agent.db"),
        (r#"{"url": "agent.db"}"#, "agent.db"),
    ] {
        let config = load(&with(state)).unwrap();
        assert_eq!((config.path.as_path(), config.postgres_url), (Path::new(path), None), "{state}");
    }
    let url = "postgres://picogent@db.internal:5432/agents";
    let config = load(&with(&format!(r#"{{"url": "{url}"}}"#))).unwrap();
    assert_eq!(config.postgres_url.as_deref(), Some(url));
    // Written back, it is the same one field.
    let written = serde_json::to_value(&config).unwrap();
    assert_eq!(written, serde_json::json!({"url": url}));
    let vars = [("PICOGENT_STATE__URL".to_string(), "postgresql://picogent@10.0.0.5/agents".to_string())];
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap();
    assert_eq!(config.state.postgres_url.as_deref(), Some("postgresql://picogent@10.0.0.5/agents"));
}

#[test]
fn a_state_section_that_cannot_be_right_is_an_error_saying_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let with = |state: &str| MINIMAL.replace("\"slug\"", &format!(r#""state": {state}, "slug""#));
    let cases = [
        (
            r#"{"path": "a.db", "url": "postgres://picogent@db/agents"}"#,
            &["`state.path` and `state.url`", "keep one"][..],
        ),
        (r#"{"url": "postgres://picogent:sekret@db/agents"}"#, &["password", "PGPASSWORD", "~/.pgpass"]),
        (r#"{"url": "postgres://picogent@db/agents?password=sekret"}"#, &["password", "PGPASSWORD"]),
        (r#"{"url": "postgres://picogent@db:notaport/agents"}"#, &["state.url", "postgres://"]),
        (r#"{"url": "mysql://picogent@db/agents"}"#, &["mysql://", "postgres://user@host:port/database"]),
        (r#"{"url": "sqlite::memory:"}"#, &["in-memory", "path of a SQLite file"]),
        (r#"{"url": "sqlite:"}"#, &["path of a SQLite file"]),
        (r#"{"file": "a.db"}"#, &["file"]),
    ];
    for (state, words) in cases {
        let error = Config::load_with_env(&write(dir.path(), &with(state)), []).unwrap_err().to_string();
        for word in words {
            assert!(error.contains(word), "{state}: {error}");
        }
        assert!(!error.contains("sekret"), "the password is never repeated: {error}");
    }
}

#[test]
fn presence_is_on_by_default_and_its_heartbeat_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), []).unwrap();
    assert_eq!(config.presence, PresenceConfig { check: true, heartbeat_ms: 10_000 });
    let text = MINIMAL.replace("\"slug\"", r#""presence": {"heartbeat_ms": 250}, "slug""#);
    let config = Config::load_with_env(&write(dir.path(), &text), []).unwrap();
    assert_eq!(config.presence, PresenceConfig { check: true, heartbeat_ms: 250 });
    let vars = [("PICOGENT_PRESENCE__CHECK".to_string(), "false".to_string())];
    assert!(!Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap().presence.check);
    for bad in ["0", "99", "600001"] {
        let vars = [("PICOGENT_PRESENCE__HEARTBEAT_MS".to_string(), bad.to_string())];
        let error = Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap_err().to_string();
        assert!(error.contains("presence.heartbeat_ms") && error.contains("from 100 to 600000"), "{bad}: {error}");
    }
    let text = MINIMAL.replace("\"slug\"", r#""presence": {"heartbeat": 250}, "slug""#);
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("heartbeat"), "{error}");
}

#[test]
fn replicas_are_off_by_default_need_postgres_and_sane_leases() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), []).unwrap();
    assert_eq!(config.replicas, ReplicasConfig::default());
    assert!(!config.replicas.enabled);
    let on = [("PICOGENT_REPLICAS__ENABLED".to_string(), "true".to_string())];
    let error = Config::load_with_env(&write(dir.path(), MINIMAL), on.clone()).unwrap_err().to_string();
    assert!(error.contains("replicas.enabled") && error.contains("state.url"), "{error}");
    let postgres = MINIMAL.replace("\"slug\"", r#""state": {"url": "postgres://picogent@127.0.0.1/agents"}, "slug""#);
    let config = Config::load_with_env(&write(dir.path(), &postgres), on.clone()).unwrap();
    assert!(config.replicas.enabled);
    assert_eq!(
        (config.replicas.stream_lease_ms, config.replicas.run_lease_ms, config.replicas.poll_ms),
        (6_000, 15_000, 500)
    );
    for (field, bad, says) in [
        ("POLL_MS", "50", "replicas.poll_ms"),
        ("STREAM_LEASE_MS", "999", "replicas.stream_lease_ms"),
        ("STREAM_LEASE_MS", "1200", "three times replicas.poll_ms"),
        ("RUN_LEASE_MS", "4000000", "replicas.run_lease_ms"),
    ] {
        let mut vars = on.to_vec();
        vars.push((format!("PICOGENT_REPLICAS__{field}"), bad.to_string()));
        let error = Config::load_with_env(&write(dir.path(), &postgres), vars).unwrap_err().to_string();
        assert!(error.contains(says), "{field}={bad}: {error}");
    }
    let text = postgres.replace("\"slug\"", r#""replicas": {"enable": true}, "slug""#);
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("enable"), "an unknown field is named: {error}");
}

#[test]
fn board_links_are_urls_with_an_id_and_default_to_the_reference_boards_pages() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), []).unwrap();
    assert_eq!(config.http.task_link(&config.tracker.url, "t-1"), "http://127.0.0.1:8700/tasks/t-1");
    assert_eq!(config.http.message_link(&config.tracker.url, "m-1"), "http://127.0.0.1:8700/messages/m-1");
    let with = |http: &str| MINIMAL.replacen("\"slug\"", &format!("\"http\": {http}, \"slug\""), 1);
    let text = with(
        r#"{"task_link": "https://board.example.com/t/{id}", "message_link": "https://board.example.com/c/{id}#m"}"#,
    );
    let config = Config::load_with_env(&write(dir.path(), &text), []).unwrap();
    assert_eq!(config.http.task_link(&config.tracker.url, "t-1"), "https://board.example.com/t/t-1");
    assert_eq!(config.http.message_link(&config.tracker.url, "m-1"), "https://board.example.com/c/m-1#m");
    let error =
        Config::load_with_env(&write(dir.path(), &with(r#"{"task_link": "https://board.example.com/t/"}"#)), [])
            .unwrap_err()
            .to_string();
    assert!(error.contains("http.task_link") && error.contains("{id}"), "{error}");
    let error = Config::load_with_env(&write(dir.path(), &with(r#"{"message_link": "board/{id}"}"#)), [])
        .unwrap_err()
        .to_string();
    assert!(error.contains("http.message_link"), "{error}");
}

#[test]
fn a_word_that_is_not_one_of_a_settings_words_is_answered_with_the_words() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (r#""chat_listen": "mention""#, "chat_listen", "\"mention\" is not one of \"mentions\", \"all\", \"none\""),
        (r#""task_listen": "all""#, "task_listen", "\"all\" is not one of \"assigned\", \"none\""),
        (r#""permissions": {"mode": "readonly"}"#, "permissions.mode", "\"auto\", \"read_only\", \"ask\""),
    ];
    for (setting, field, says) in cases {
        let text = MINIMAL.replace("\"slug\"", &format!("{setting}, \"slug\""));
        let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
        assert!(error.contains(&format!("field `{field}`")) && error.contains(says), "{setting}: {error}");
        assert!(!error.contains("variant"), "no Rust words: {error}");
    }
    let text = MINIMAL.replace("\"model\": \"offline-planner\"", "\"model\": \"m\", \"max_tokens_field\": \"tokens\"");
    let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
    assert!(error.contains("\"max_completion_tokens\", \"max_tokens\""), "{error}");
    // Every word still loads, from the file and from the environment.
    let text = MINIMAL.replace("\"slug\"", r#""chat_listen": "all", "permissions": {"mode": "read_only"}, "slug""#);
    let config = Config::load_with_env(&write(dir.path(), &text), []).unwrap();
    assert_eq!((config.chat_listen, config.permissions.mode), (ChatListen::All, PermissionMode::ReadOnly));
    let vars = [("PICOGENT_CHAT_LISTEN".to_string(), "none".to_string())];
    assert_eq!(Config::load_with_env(&write(dir.path(), MINIMAL), vars).unwrap().chat_listen, ChatListen::None);
}

#[test]
fn a_mistake_in_an_override_is_told_as_the_variables_not_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), MINIMAL);
    let cases = [
        ("PICOGENT_LIMITS__MAX_TURNS", "many", "field `limits.max_turns`: expected an integer"),
        ("PICOGENT_CHAT_LISTEN", "mention", "is not one of \"mentions\""),
        ("PICOGENT_PRESENCE__HEARTBEAT_MS", "5", "from 100 to 600000"),
        ("PICOGENT_TRACKER__URL", "ftp://board", "tracker.url"),
        ("PICOGENT_LIMITS__MAX_TURN", "3", "unknown field `max_turn`"),
        ("PICOGENT_STATE__URL", "mysql://picogent@db/agents", "mysql://"),
        ("PICOGENT_ALLOWED_BOTS", "[\"a\"", "JSON array"),
    ];
    for (variable, value, says) in cases {
        // Beside a correct override, which is not blamed.
        let vars = [
            (variable.to_string(), value.to_string()),
            ("PICOGENT_LIMITS__MAX_TOOL_CALLS".to_string(), "9".to_string()),
        ];
        let error = Config::load_with_env(&path, vars).unwrap_err().to_string();
        assert!(error.starts_with(&format!("environment variable {variable}: ")), "{variable}: {error}");
        assert!(error.contains(says), "{variable}: {error}");
        assert!(!error.contains("agent.json"), "the file is not blamed: {error}");
    }
    // A mistake in the file stays the file's, whatever the environment sets beside it.
    let text = MINIMAL.replace("\"slug\"", r#""limits": {"max_turns": "many"}, "slug""#);
    let vars = [("PICOGENT_LIMITS__MAX_TOOL_CALLS".to_string(), "9".to_string())];
    let error = Config::load_with_env(&write(dir.path(), &text), vars).unwrap_err().to_string();
    assert!(error.starts_with("config file") && error.contains("agent.json"), "{error}");
    assert!(error.contains("field `limits.max_turns`"), "{error}");
    // An override that fixes the file's mistake is not blamed for it either: it loads.
    let vars = [("PICOGENT_LIMITS__MAX_TURNS".to_string(), "4".to_string())];
    assert_eq!(Config::load_with_env(&write(dir.path(), &text), vars).unwrap().limits.max_turns, 4);
}

#[test]
fn an_override_of_one_place_of_the_state_replaces_the_files_other() {
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../agent.json");
    let url = "postgres://picogent@127.0.0.1:5432/agents";
    let vars = [("PICOGENT_STATE__URL".to_string(), url.to_string())];
    let config = Config::load_with_env(&shipped, vars).unwrap();
    assert_eq!(config.state.postgres_url.as_deref(), Some(url), "the shipped file sets state.path");
    let vars = [("PICOGENT_STATE__URL".to_string(), "sqlite:/var/lib/picogent/agent.db".to_string())];
    let config = Config::load_with_env(&shipped, vars).unwrap();
    assert_eq!(
        (config.state.path.as_path(), config.state.postgres_url),
        (Path::new("/var/lib/picogent/agent.db"), None)
    );
    // And the other way round: a file with state.url, and PICOGENT_STATE__PATH.
    let dir = tempfile::tempdir().unwrap();
    let text = MINIMAL.replace("\"slug\"", &format!(r#""state": {{"url": "{url}"}}, "slug""#));
    let vars = [("PICOGENT_STATE__PATH".to_string(), "/srv/agent.db".to_string())];
    let config = Config::load_with_env(&write(dir.path(), &text), vars).unwrap();
    assert_eq!((config.state.path.as_path(), config.state.postgres_url), (Path::new("/srv/agent.db"), None));
    // Both from the environment is still one too many, and the error says so.
    let vars = [
        ("PICOGENT_STATE__PATH".to_string(), "/srv/agent.db".to_string()),
        ("PICOGENT_STATE__URL".to_string(), url.to_string()),
    ];
    let error = Config::load_with_env(&write(dir.path(), &text), vars).unwrap_err().to_string();
    assert!(error.contains("`state.path` and `state.url` are both set"), "{error}");
    assert!(error.starts_with("environment variable PICOGENT_STATE__"), "{error}");
}

#[test]
fn a_json_mistake_is_shown_on_its_line_with_the_line_before_it() {
    let dir = tempfile::tempdir().unwrap();
    // A missing comma: serde_json notices it on the next line; the line before is shown too.
    let text = "{\n    \"slug\": \"picogent\",\n    \"name\": \"Picogent\"\n\n    \"tracker\": {\"url\": \"http://127.0.0.1:8700\"}\n}\n";
    let error = Config::load_with_env(&write(dir.path(), text), []).unwrap_err().to_string();
    assert!(error.contains("agent.json") && error.contains("line 5, column 5"), "{error}");
    assert!(error.contains("3 |     \"name\": \"Picogent\""), "the line with the mistake: {error}");
    assert!(error.contains("5 |     \"tracker\""), "the line it was noticed on: {error}");
    assert!(error.contains("    |     ^"), "a caret under the column: {error}");
    assert!(error.contains("a comma missing at the end of line 3"), "{error}");
    assert!(!error.contains("4 |"), "the blank line between is left out: {error}");
    // A trailing comma, and a file cut short: the line, no guess about commas.
    for (text, line) in [
        ("{\"slug\": \"picogent\",\n \"name\": \"P\",\n}\n", "3 | }"),
        ("{\"slug\": \"picogent\",\n \"name\": \"P\"", "2 |  \"name\": \"P\""),
    ] {
        let error = Config::load_with_env(&write(dir.path(), text), []).unwrap_err().to_string();
        assert!(error.contains(line) && !error.contains("comma missing"), "{text:?}: {error}");
    }
}

#[test]
fn the_listeners_limits_have_defaults_and_out_of_range_values_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), []).unwrap();
    let doors = config.http.doors();
    assert_eq!(doors.header_timeout, std::time::Duration::from_secs(10));
    assert_eq!(doors.max_connections, 512);
    assert_eq!(config.http.max_live_streams, 64);
    let sessions = config.http.sessions();
    assert_eq!(sessions.idle, Some(std::time::Duration::from_secs(8 * 3600)));
    assert_eq!(sessions.lifetime, Some(std::time::Duration::from_secs(24 * 3600)));
    let cases = [
        (r#"{"header_timeout_ms": 0}"#, "http.header_timeout_ms"),
        (r#"{"header_timeout_ms": 3600000}"#, "http.header_timeout_ms"),
        (r#"{"max_connections": 0}"#, "http.max_connections"),
        (r#"{"max_connections": 10, "max_live_streams": 11}"#, "http.max_live_streams"),
        (r#"{"max_live_streams": 0}"#, "http.max_live_streams"),
        (r#"{"session_idle_ms": 10}"#, "http.session_idle_ms"),
        (r#"{"session_lifetime_ms": 0}"#, "http.session_lifetime_ms"),
    ];
    for (http, field) in cases {
        let text = MINIMAL.replacen("\"slug\"", &format!("\"http\": {http}, \"slug\""), 1);
        let error = Config::load_with_env(&write(dir.path(), &text), []).unwrap_err().to_string();
        assert!(error.contains(field) && error.contains("expected"), "{http}: {error}");
    }
}

#[test]
fn a_credential_in_a_url_is_refused_naming_the_field_and_not_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("http://127.0.0.1:8790/v1", "http://user:pw-secret@127.0.0.1:8790/v1", "llm.base_url"),
        ("http://127.0.0.1:8790/v1", "http://127.0.0.1:8790/v1?password=pw-secret", "llm.base_url"),
        ("http://127.0.0.1:8700", "http://pw-secret@127.0.0.1:8700", "tracker.url"),
    ];
    for (good, bad, field) in cases {
        let error = Config::load_with_env(&write(dir.path(), &MINIMAL.replace(good, bad)), []).unwrap_err().to_string();
        assert!(error.contains(field) && error.contains("holds a credential"), "{bad}: {error}");
        assert!(!error.contains("pw-secret"), "the message shows the secret: {error}");
    }
}

#[test]
fn the_words_are_the_ones_serde_writes() {
    assert_eq!(picogent_support::choice::words::<ChatListen>(), ["mentions", "all", "none"]);
    assert_eq!(picogent_support::choice::words::<PermissionMode>(), ["auto", "read_only", "ask"]);
    assert_eq!(picogent_support::choice::words::<MaxTokensField>(), ["max_completion_tokens", "max_tokens"]);
    for mode in [PermissionMode::Auto, PermissionMode::ReadOnly, PermissionMode::Ask] {
        let written = serde_json::to_value(mode).unwrap();
        let word = written.as_str().unwrap();
        assert!(picogent_support::choice::words::<PermissionMode>().contains(&word), "{word}");
    }
}

#[test]
fn the_output_cap_defaults_to_a_few_thousand_tokens_and_is_never_zero() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::load_with_env(&write(dir.path(), MINIMAL), []).unwrap();
    assert_eq!(config.llm.max_output_tokens, None);
    // What the loop asks a request for when the file sets nothing.
    let window = picogent_agent::ModelWindow::from_config(&config.llm);
    assert_eq!(window.output_cap, DEFAULT_MAX_OUTPUT_TOKENS);
    // A small local window still loads, and keeps its own cap.
    let small = MINIMAL.replace("\"model\": \"offline-planner\"", "\"model\": \"m\", \"context_tokens\": 4096");
    let config = Config::load_with_env(&write(dir.path(), &small), []).unwrap();
    assert_eq!(picogent_agent::ModelWindow::from_config(&config.llm).output_cap, 2048);
    let vars = [("PICOGENT_LLM__MAX_OUTPUT_TOKENS".to_string(), "256".to_string())];
    assert_eq!(Config::load_with_env(&write(dir.path(), &small), vars).unwrap().llm.max_output_tokens, Some(256));
    let zero = MINIMAL.replace("\"model\": \"offline-planner\"", "\"model\": \"m\", \"max_output_tokens\": 0");
    let error = Config::load_with_env(&write(dir.path(), &zero), []).unwrap_err().to_string();
    assert!(error.contains("llm.max_output_tokens") && error.contains("greater than 0"), "{error}");
}

#[test]
fn http_allowed_hosts_takes_host_names_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let load = |hosts: &str| {
        let text = MINIMAL.replace("\"name\"", &format!("\"http\": {{\"allowed_hosts\": {hosts}}}, \"name\""));
        Config::load_with_env(&write(dir.path(), &text), [])
    };
    let loaded = load(r#"["agent.example.com", "agent.example.com:8443"]"#).unwrap();
    assert_eq!(loaded.http.allowed_hosts, ["agent.example.com", "agent.example.com:8443"]);
    let error = load(r#"["https://agent.example.com/"]"#).unwrap_err().to_string();
    assert!(error.contains("http.allowed_hosts") && error.contains("is not a host name"), "{error}");
}
