//! Tool schemas as Gemini takes them.
//!
//! A function declaration's `parameters` is an OpenAPI 3.0 schema object, a subset of the
//! JSON Schema the tool registry and MCP servers write. What the subset has is kept; what
//! it lacks is rewritten where the meaning survives and dropped where it does not:
//!
//! - kept: `type`, `description`, `title`, `enum` (of strings), `properties`, `required`
//!   (the names among `properties`), `items`, `anyOf`, `minItems`, `maxItems`, `minimum`,
//!   `maximum`, `minLength`, `maxLength`, `pattern`, `nullable`, and the `format`s Gemini
//!   knows (`date-time`, `enum` for strings; `int32`, `int64`; `float`, `double`);
//! - rewritten: a type list (`["string", "null"]`) becomes the type and `nullable`; a
//!   string `const` a one-value `enum`; `oneOf` becomes `anyOf`; an array without `items`
//!   gets string items (Gemini requires them); `properties` go only on an object;
//! - dropped: `$schema`, `$ref`/`$defs`, `additionalProperties`, `allOf`, `not`, `default`,
//!   `examples`, `patternProperties`, conditionals, other formats, non-string enums, and
//!   anything nested deeper than [`MAX_DEPTH`].
//!
//! A function without arguments gets no `parameters` at all: Gemini refuses an object
//! schema with no properties.

use serde_json::{Map, Value};

/// Schemas nested deeper than this are cut to their type (an MCP server's schema is
/// outside input).
pub(crate) const MAX_DEPTH: usize = 16;

/// The `parameters` of a declaration for the tool schema `schema`; `None` when it takes
/// no arguments.
pub(crate) fn parameters(schema: &Value) -> Option<Value> {
    let converted = convert(schema, 0);
    let has_properties = converted
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|properties| !properties.is_empty());
    let is_object = converted.get("type").and_then(Value::as_str) == Some("object");
    (!is_object || has_properties).then_some(converted)
}

fn convert(schema: &Value, depth: usize) -> Value {
    let Some(schema) = schema.as_object() else {
        return Value::Object(Map::new());
    };
    let mut out = Map::new();
    let (kind, nullable) = kind_of(schema);
    if let Some(kind) = &kind {
        out.insert("type".into(), Value::String(kind.clone()));
    }
    if nullable || schema.get("nullable").and_then(Value::as_bool) == Some(true) {
        out.insert("nullable".into(), Value::Bool(true));
    }
    for key in ["description", "title", "pattern"] {
        if let Some(text @ Value::String(_)) = schema.get(key) {
            out.insert(key.into(), text.clone());
        }
    }
    for key in [
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
    ] {
        if let Some(number @ Value::Number(_)) = schema.get(key) {
            out.insert(key.into(), number.clone());
        }
    }
    if let Some(format) = schema.get("format").and_then(Value::as_str)
        && known_format(kind.as_deref(), format)
    {
        out.insert("format".into(), Value::String(format.into()));
    }
    if let Some(values) = enum_of(schema) {
        out.insert("enum".into(), Value::Array(values));
        // Gemini's enums are of strings, and say so.
        out.insert("type".into(), Value::String("string".into()));
    }
    if depth >= MAX_DEPTH {
        return Value::Object(out);
    }
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .filter(|_| kind.as_deref() == Some("object"));
    if let Some(properties) = properties {
        let converted: Map<String, Value> = properties
            .iter()
            .map(|(name, property)| (name.clone(), convert(property, depth + 1)))
            .collect();
        let required: Vec<Value> = schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|name| {
                name.as_str()
                    .is_some_and(|name| converted.contains_key(name))
            })
            .cloned()
            .collect();
        out.insert("properties".into(), Value::Object(converted));
        if !required.is_empty() {
            out.insert("required".into(), Value::Array(required));
        }
    }
    match schema.get("items").filter(|items| items.is_object()) {
        Some(items) => {
            out.insert("items".into(), convert(items, depth + 1));
        }
        None if kind.as_deref() == Some("array") => {
            out.insert("items".into(), serde_json::json!({"type": "string"}));
        }
        None => {}
    }
    let any_of = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array);
    if let Some(options) = any_of {
        let options: Vec<Value> = options
            .iter()
            .filter(|option| option.is_object())
            .map(|option| convert(option, depth + 1))
            .collect();
        if !options.is_empty() {
            out.insert("anyOf".into(), Value::Array(options));
        }
    }
    Value::Object(out)
}

/// The schema's type, and whether `null` was one of a list of types.
fn kind_of(schema: &Map<String, Value>) -> (Option<String>, bool) {
    match schema.get("type") {
        Some(Value::String(kind)) if kind != "null" => (Some(kind.clone()), false),
        Some(Value::Array(kinds)) => {
            let nullable = kinds.iter().any(|kind| kind == "null");
            let kind = kinds
                .iter()
                .filter_map(Value::as_str)
                .find(|kind| *kind != "null")
                .map(str::to_owned);
            (kind, nullable)
        }
        _ => (None, false),
    }
}

/// The string values of `enum`, or a string `const` as one; `None` for any other.
fn enum_of(schema: &Map<String, Value>) -> Option<Vec<Value>> {
    if let Some(Value::Array(values)) = schema.get("enum") {
        return values
            .iter()
            .all(Value::is_string)
            .then(|| values.clone())
            .filter(|values| !values.is_empty());
    }
    match schema.get("const") {
        Some(value @ Value::String(_)) => Some(vec![value.clone()]),
        _ => None,
    }
}

fn known_format(kind: Option<&str>, format: &str) -> bool {
    matches!(
        (kind, format),
        (Some("string"), "date-time" | "enum")
            | (Some("integer"), "int32" | "int64")
            | (Some("number"), "float" | "double")
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn what_gemini_lacks_is_rewritten_or_dropped() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "path": {"type": "string", "description": "where", "format": "uri"},
                "mode": {"type": ["string", "null"], "enum": ["r", "w"]},
                "kind": {"const": "file"},
                "count": {"type": "integer", "minimum": 1, "default": 3, "format": "int32"},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
                "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
                "ref": {"$ref": "#/$defs/thing"},
                "level": {"enum": [1, 2]},
                "any": {"type": "array"},
                "free": {"type": "object"}
            },
            "required": ["path", "missing"],
            "$defs": {"thing": {"type": "string"}}
        });
        assert_eq!(
            parameters(&schema).expect("has arguments"),
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "where"},
                    "mode": {"type": "string", "nullable": true, "enum": ["r", "w"]},
                    "kind": {"type": "string", "enum": ["file"]},
                    "count": {"type": "integer", "minimum": 1, "format": "int32"},
                    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
                    "either": {"anyOf": [{"type": "string"}, {"type": "number"}]},
                    "ref": {},
                    "level": {},
                    "any": {"type": "array", "items": {"type": "string"}},
                    "free": {"type": "object"}
                },
                "required": ["path"]
            })
        );
    }

    #[test]
    fn a_tool_without_arguments_has_no_parameters() {
        assert_eq!(parameters(&json!({"type": "object"})), None);
        assert_eq!(
            parameters(&json!({"type": "object", "properties": {}})),
            None
        );
    }

    #[test]
    fn a_schema_nested_past_the_limit_is_cut_not_followed() {
        let mut schema = json!({"type": "string"});
        for _ in 0..1000 {
            schema = json!({"type": "object", "properties": {"a": schema}});
        }
        let converted = parameters(&schema).expect("has arguments");
        let mut depth = 0;
        let mut at = &converted;
        while let Some(next) = at.get("properties").and_then(|p| p.get("a")) {
            at = next;
            depth += 1;
        }
        assert_eq!(depth, MAX_DEPTH);
        assert_eq!(at, &json!({"type": "object"}));
    }
}
