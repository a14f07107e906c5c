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
    assert!(error.contains("sometimes"), "{error}");
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
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("agent.json");
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
