//! What the two peers share: how they report to the test (stderr lines the test parses; stdout
//! carries ACP), and the wording of the scenario's files and messages.

use serde_json::{Map, Value};

/// Reports one step: `RESULT {"step": step, "ok": ok, ...fields}` on stderr.
pub fn report(step: &str, ok: bool, fields: Value) {
    let mut line = Map::new();
    line.insert("step".into(), step.into());
    line.insert("ok".into(), ok.into());
    if let Value::Object(fields) = fields {
        line.extend(fields);
    }
    eprintln!("RESULT {}", Value::Object(line));
}

/// The error object of a failed request, as the report shows it.
pub fn error_fields(error: &agent_client_protocol::Error) -> Value {
    serde_json::json!({ "code": i32::from(error.code), "message": error.message, "data": error.data })
}
