//! [`Data`]: the `data` of a command result, as a JSON value or as JSON already serialized.
//!
//! A large result (a page of findings, the tools list) is built straight into its JSON text
//! from typed rows: building a `serde_json::Value` tree first cost an allocation per field
//! and per key, a second walk to serialize it, and the tree's memory while it lived (a page
//! of 5,000 findings). Readers of a result do not see the difference: `Data` dereferences to
//! a `Value`, parsing serialized data on the first such read (the front ends that need a
//! tree, MCP's structured content and tests, pay for it; the LSP reply does not).
//!
//! Invariant: serialized data is one valid JSON value (it is only made by serializing, or
//! by a writer tested to give what serializing gives: [`Data::written`]).

use std::sync::OnceLock;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// The `data` of a [`crate::CommandResult`].
#[derive(Clone)]
pub struct Data(Repr);

#[derive(Clone)]
enum Repr {
    Tree(Value),
    Text {
        json: Box<RawValue>,
        tree: OnceLock<Value>,
    },
    /// JSON text a writer of the crate's own made ([`Data::written`]).
    Written {
        json: String,
        tree: OnceLock<Value>,
    },
}

impl Data {
    /// `data` serialized straight from `v` (no `Value` tree). A value that cannot be
    /// serialized (a map with non-string keys; none of the protocol's types) becomes `null`.
    pub fn serialized<T: Serialize + ?Sized>(v: &T) -> Data {
        match serde_json::value::to_raw_value(v) {
            Ok(json) => Data(Repr::Text { json, tree: OnceLock::new() }),
            Err(_) => Data(Repr::Tree(Value::Null)),
        }
    }

    /// `data` from JSON text written by hand for a hot path (a page of findings), where
    /// serde's string escaping (a byte at a time) was a tenth of the reply's time.
    ///
    /// The caller guarantees `json` is exactly what serializing the value would give (its
    /// writer is tested against serde_json); debug builds check that it is one valid JSON
    /// value.
    pub fn written(json: String) -> Data {
        debug_assert!(
            serde_json::from_str::<serde::de::IgnoredAny>(&json).is_ok(),
            "Data::written given invalid JSON: {json}"
        );
        // Kept as it is: shrinking it to fit would copy it.
        Data(Repr::Written { json, tree: OnceLock::new() })
    }

    /// The JSON text when this data was built serialized.
    pub fn as_json_text(&self) -> Option<&str> {
        match &self.0 {
            Repr::Tree(_) => None,
            Repr::Text { json, .. } => Some(json.get()),
            Repr::Written { json, .. } => Some(json),
        }
    }

    /// Appends the data's JSON (serialized data is copied as it is).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        match &self.0 {
            // Writing to a Vec cannot fail, and a `Value` always serializes.
            Repr::Tree(v) => serde_json::to_writer(out, v).unwrap_or(()),
            Repr::Text { json, .. } => out.extend_from_slice(json.get().as_bytes()),
            Repr::Written { json, .. } => out.extend_from_slice(json.as_bytes()),
        }
    }

    /// The data as a `Value` (serialized data is parsed).
    pub fn into_value(self) -> Value {
        match self.0 {
            Repr::Tree(v) => v,
            Repr::Text { json, tree } => tree.into_inner().unwrap_or_else(|| parse(json.get())),
            Repr::Written { json, tree } => tree.into_inner().unwrap_or_else(|| parse(&json)),
        }
    }
}

fn parse(json: &str) -> Value {
    // Valid by the invariant; `null` would only hide a bug, never a client's input.
    serde_json::from_str(json).unwrap_or(Value::Null)
}

impl std::ops::Deref for Data {
    type Target = Value;
    fn deref(&self) -> &Value {
        match &self.0 {
            Repr::Tree(v) => v,
            Repr::Text { json, tree } => tree.get_or_init(|| parse(json.get())),
            Repr::Written { json, tree } => tree.get_or_init(|| parse(json)),
        }
    }
}

impl Default for Data {
    fn default() -> Self {
        Data(Repr::Tree(Value::Null))
    }
}

impl From<Value> for Data {
    fn from(v: Value) -> Self {
        Data(Repr::Tree(v))
    }
}

impl From<Data> for Value {
    fn from(d: Data) -> Self {
        d.into_value()
    }
}

impl PartialEq for Data {
    fn eq(&self, other: &Data) -> bool {
        **self == **other
    }
}

impl PartialEq<Value> for Data {
    fn eq(&self, other: &Value) -> bool {
        **self == *other
    }
}

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Repr::Tree(v) => v.fmt(f),
            Repr::Text { json, .. } => f.write_str(json.get()),
            Repr::Written { json, .. } => f.write_str(json),
        }
    }
}

impl Serialize for Data {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::Tree(v) => v.serialize(s),
            Repr::Text { json, .. } => json.serialize(s),
            // Not on the LSP reply's path (it copies the text, `write_json`); borrowed, not
            // copied (`forge-lsp call --json` of a page).
            Repr::Written { json, .. } => match serde_json::from_str::<&RawValue>(json) {
                Ok(raw) => raw.serialize(s),
                Err(_) => Value::Null.serialize(s),
            },
        }
    }
}

impl<'de> Deserialize<'de> for Data {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Data::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Row<'a> {
        id: i64,
        file: &'a str,
        scenario: Option<&'a str>,
    }

    /// Hand-written JSON reads, writes and serializes as the tree it stands for.
    #[test]
    fn written_data_reads_and_writes_as_the_tree_would() {
        let text = r#"{"findings":[{"id":1,"file":"a \"b\"\n.rs","scenario":null}],"nextBeforeId":null}"#;
        let data = Data::written(text.to_string());
        let tree = json!({ "findings": [{ "id": 1, "file": "a \"b\"\n.rs", "scenario": null }], "nextBeforeId": null });
        assert_eq!(data, tree);
        assert_eq!(data.as_json_text(), Some(text));
        let mut out = Vec::new();
        data.write_json(&mut out);
        assert_eq!(out, text.as_bytes());
        assert_eq!(serde_json::to_string(&data).unwrap(), text);
        assert_eq!(data.clone().into_value(), tree);
    }

    #[test]
    fn serialized_data_reads_and_writes_as_the_tree_would() {
        let rows = [Row { id: 1, file: "a \"b\"\n.rs", scenario: None }, Row { id: 2, file: "é", scenario: Some("s") }];
        let text = Data::serialized(&json!(null)); // a scalar too
        assert_eq!(text, Value::Null);
        let data = Data::serialized(&serde_json::json!({ "findings": serde_json::to_value(&rows).unwrap() }));
        let tree: Data = json!({ "findings": [
            { "id": 1, "file": "a \"b\"\n.rs", "scenario": null },
            { "id": 2, "file": "é", "scenario": "s" }
        ] })
        .into();
        // Deref, indexing and equality see the same value.
        assert_eq!(data, tree);
        assert_eq!(data["findings"][1]["file"], "é");
        assert!(data.as_json_text().is_some() && tree.as_json_text().is_none());
        // Written inside a result, it is the same JSON as the tree's.
        let a = serde_json::to_value(crate::CommandResult { text: "t".into(), data: data.clone() }).unwrap();
        let b = serde_json::to_value(crate::CommandResult { text: "t".into(), data: tree.clone() }).unwrap();
        assert_eq!(a, b);
        assert_eq!(data.into_value(), tree.into_value());
        // Straight from typed rows, no tree.
        let direct = Data::serialized(&rows);
        assert_eq!(
            direct.as_json_text(),
            Some(r#"[{"id":1,"file":"a \"b\"\n.rs","scenario":null},{"id":2,"file":"é","scenario":"s"}]"#)
        );
    }

    #[test]
    fn a_result_writes_the_bytes_serde_json_writes() {
        let text = "## Plan\n- a \"quoted\" `step`\tand \\ a path\n".repeat(50);
        for data in
            [Data::serialized(&json!({ "uri": "forge://plan/x", "n": [1, 2] })), json!({ "b": 1, "a": "é\n" }).into()]
        {
            let r = crate::CommandResult { text: text.clone(), data };
            let mut ours = Vec::new();
            r.write_json(&mut ours);
            assert_eq!(String::from_utf8(ours).unwrap(), serde_json::to_string(&r).unwrap());
        }
    }

    #[test]
    fn a_result_read_back_has_a_tree() {
        let r: crate::CommandResult = serde_json::from_str(r#"{"text":"x","data":{"a":[1,2]}}"#).unwrap();
        assert_eq!(r.data["a"][1], 2);
        assert!(r.data.as_json_text().is_none());
    }
}
