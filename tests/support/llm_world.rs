//! The world the agent-loop tests run in: tools over a tracker. TEMPORARY in-memory stand-in
//! until the reference board and the registry are merged; then this becomes board + registry.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use picogent::tools::{ToolContext, ToolSource};
use rmcp::model::{CallToolResult, ContentBlock as Content, Tool, ToolAnnotations};
use serde_json::{Value, json};

#[derive(Clone, Debug)]
pub struct Task {
    pub id: String,
    pub key: String,
    pub description: String,
    pub status: String,
    pub steps: Vec<(String, String, bool)>,
    pub comments: Vec<String>,
}

#[derive(Default)]
struct Data {
    tasks: BTreeMap<String, Task>,
    next: u32,
}

pub struct World {
    data: Arc<Mutex<Data>>,
}

struct Source {
    data: Arc<Mutex<Data>>,
}

impl World {
    pub async fn start() -> World {
        World { data: Arc::new(Mutex::new(Data::default())) }
    }

    pub fn tools(&self) -> Arc<dyn ToolSource> {
        Arc::new(Source { data: self.data.clone() })
    }

    pub fn tool_names(&self) -> Vec<String> {
        Source { data: self.data.clone() }.tools().iter().map(|t| t.name.to_string()).collect()
    }

    pub fn agent_slug(&self) -> &str {
        "picogent"
    }

    pub async fn create_task(&self, description: &str) -> String {
        let mut data = self.data.lock().unwrap();
        data.next += 1;
        let key = format!("TE-{}", data.next);
        let task = Task {
            id: format!("00000000-0000-4000-8000-{:012}", data.next),
            key: key.clone(),
            description: description.to_string(),
            status: "todo".into(),
            steps: vec![],
            comments: vec![],
        };
        data.tasks.insert(key.clone(), task);
        key
    }

    pub async fn task(&self, key: &str) -> Task {
        self.data.lock().unwrap().tasks[key].clone()
    }

    pub async fn shutdown(self) {}
}

fn schema(properties: &[&str]) -> serde_json::Map<String, Value> {
    let props: serde_json::Map<String, Value> =
        properties.iter().map(|p| (p.to_string(), json!({"type": "string"}))).collect();
    json!({"type": "object", "properties": props}).as_object().unwrap().clone()
}

impl Source {
    fn find<'a>(data: &'a mut Data, id: &str) -> Option<&'a mut Task> {
        data.tasks.values_mut().find(|t| t.key == id || t.id == id)
    }
}

impl ToolSource for Source {
    fn tools(&self) -> Vec<Tool> {
        let ro = |t: Tool| t.with_annotations(ToolAnnotations::new().read_only(true));
        vec![
            ro(Tool::new("get_task", "Read a task", schema(&["task_id"]))),
            ro(Tool::new("list_steps", "List steps", schema(&["task_id"]))),
            Tool::new("add_step", "Add a step", schema(&["task_id", "title"])),
            Tool::new("complete_step", "Complete a step", schema(&["task_id", "step_id"])),
            Tool::new("update_task", "Update a task", schema(&["task_id", "status"])),
            Tool::new("send_message", "Send a message", schema(&["content", "task_id", "parent_id"])),
            Tool::new("reply_message", "Reply", schema(&["parent_id", "content"])),
        ]
    }

    fn call<'a>(&'a self, name: &'a str, arguments: Value, _context: &'a ToolContext) -> BoxFuture<'a, CallToolResult> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            let mut data = self.data.lock().unwrap();
            let task_id = arguments.get("task_id").and_then(Value::as_str).unwrap_or_default().to_string();
            let Some(task) = Source::find(&mut data, &task_id) else {
                return CallToolResult::error(vec![Content::text(format!("task {task_id} not found"))]);
            };
            let value = match name {
                "get_task" => {
                    json!({"id": task.id, "key": task.key, "description": task.description, "status": task.status})
                }
                "list_steps" => {
                    json!({"steps": task.steps.iter().map(|s| json!({"id": s.0, "title": s.1, "done": s.2})).collect::<Vec<_>>()})
                }
                "add_step" => {
                    let id = format!("step-{}", task.steps.len() + 1);
                    task.steps.push((id.clone(), arguments["title"].as_str().unwrap_or("").into(), false));
                    json!({"id": id})
                }
                "complete_step" => {
                    let step = arguments["step_id"].as_str().unwrap_or("");
                    for s in &mut task.steps {
                        if s.0 == step {
                            s.2 = true;
                        }
                    }
                    json!({"id": step, "done": true})
                }
                "update_task" => {
                    task.status = arguments["status"].as_str().unwrap_or("").into();
                    json!({"status": task.status})
                }
                "send_message" => {
                    task.comments.push(arguments["content"].as_str().unwrap_or("").into());
                    json!({"id": "m"})
                }
                _ => return CallToolResult::error(vec![Content::text("nope")]),
            };
            CallToolResult::structured(value)
        })
    }
}
