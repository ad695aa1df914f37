//! The error table of PROTOCOL.md §3.

use std::fmt;

/// The kind of a failed call; `code()` gives its JSON-RPC error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    InvalidParams,
    Denied,
    NotFound,
    Conflict,
    Precondition,
    Busy,
    Invalid,
    Internal,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 8] = [
        Self::InvalidParams,
        Self::Denied,
        Self::NotFound,
        Self::Conflict,
        Self::Precondition,
        Self::Busy,
        Self::Invalid,
        Self::Internal,
    ];

    pub fn code(self) -> i64 {
        match self {
            Self::InvalidParams => -32602,
            Self::Denied => 1001,
            Self::NotFound => 1002,
            Self::Conflict => 1003,
            Self::Precondition => 1004,
            Self::Busy => 1005,
            Self::Invalid => 1006,
            Self::Internal => 1007,
        }
    }

    /// The `error.data.kind` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidParams => "invalid_params",
            Self::Denied => "denied",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::Precondition => "precondition",
            Self::Busy => "busy",
            Self::Invalid => "invalid",
            Self::Internal => "internal",
        }
    }

    pub fn from_code(code: i64) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.code() == code)
    }
}

/// A failed tool call: the kind and the failure text an agent reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    pub kind: ErrorKind,
    pub message: String,
    /// What a program may act on, beside `kind` in the JSON-RPC error's `data` (an object's
    /// fields; docs/protocol.md, "Errors"): `runBy` of a loop run by another server.
    pub data: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ToolError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), data: None }
    }
    /// This error with `field` set to `value` in its data.
    pub fn with_data(mut self, field: &str, value: serde_json::Value) -> Self {
        self.data.get_or_insert_with(Default::default).insert(field.to_string(), value);
        self
    }
    pub fn invalid_params(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidParams, m)
    }
    pub fn denied(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Denied, m)
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, m)
    }
    pub fn conflict(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, m)
    }
    pub fn precondition(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Precondition, m)
    }
    pub fn busy(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Busy, m)
    }
    pub fn invalid(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, m)
    }
    pub fn internal(m: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, m)
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}
