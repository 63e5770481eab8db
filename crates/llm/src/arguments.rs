//! A tool call's arguments, which the internal model keeps as the text the model wrote and
//! Anthropic's and Gemini's APIs carry as a JSON object — both ways.

use serde_json::Value;

/// A call's arguments as the object the wire wants. Arguments that are not a JSON object (a
/// model's broken output, already answered with an error result) become `{}`.
pub(crate) fn object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(value @ Value::Object(_)) => value,
        _ => Value::Object(serde_json::Map::new()),
    }
}

/// A call's object as the text the internal model keeps (`{}` when absent).
pub(crate) fn text(object: &Value) -> String {
    match object {
        Value::Null => "{}".to_owned(),
        other => other.to_string(),
    }
}
