//! The examples in docs/protocol.md are valid inputs of their tools, the same inputs with an
//! unknown field are rejected, and every offered schema forbids unknown fields. The registry
//! has an offer for every command.

use forge_lsp::tools;
use serde_json::Value;

fn examples() -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/protocol.md")).unwrap();
    let mut out = vec![];
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        let Some(cmd) = l.strip_prefix("Example (").and_then(|r| r.strip_suffix("):")) else { continue };
        assert_eq!(lines.next(), Some("```json"), "example of {cmd} must be a json block");
        let body: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let v: Value = serde_json::from_str(&body.join("\n")).unwrap_or_else(|e| panic!("{cmd}: {e}"));
        out.push((cmd.to_string(), v));
    }
    out
}

#[test]
fn docs_examples_parse_and_unknown_fields_fail() {
    let ex = examples();
    assert!(ex.len() >= 15, "found only {} examples", ex.len());
    for (cmd, v) in ex {
        let tool = tools::find(&cmd).unwrap_or_else(|| panic!("{cmd} is not a command"));
        (tool.validate)(v.clone()).unwrap_or_else(|e| panic!("{cmd}: {}", e.message));
        let mut bad = v.clone();
        bad["bogusField"] = Value::Bool(true);
        let e = (tool.validate)(bad).expect_err("unknown field must fail");
        assert_eq!(e.kind.code(), -32602);
        assert!(e.message.contains("bogusField"), "{}", e.message);
    }
}

#[test]
fn every_command_has_an_offer_with_a_closed_schema() {
    let offers = tools::offers();
    for cmd in tools::commands() {
        let o = offers.iter().find(|o| o.command == cmd).unwrap_or_else(|| panic!("no offer for {cmd}"));
        assert!(!o.description.is_empty());
        assert_eq!(o.input_schema["$schema"], "https://json-schema.org/draft/2020-12/schema", "{cmd}");
        assert_eq!(
            o.input_schema["additionalProperties"],
            Value::Bool(false),
            "{cmd} schema must reject unknown fields"
        );
    }
}
