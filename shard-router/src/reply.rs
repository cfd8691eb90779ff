//! Decoding of script replies (`{code, ...}` arrays) into typed values. Nothing here
//! leaves the crate: callers see the outcome enums in `outcome.rs`.

use redis::Value;

use crate::error::StockError;

/// A script reply: its code and the remaining fields.
pub(crate) struct Reply {
    op: &'static str,
    pub(crate) code: i64,
    fields: Vec<Value>,
}

impl Reply {
    pub(crate) fn parse(op: &'static str, value: Value) -> Result<Self, StockError> {
        let Value::Array(mut items) = value else {
            return Err(protocol(op, format!("expected an array, got {value:?}")));
        };
        if items.is_empty() {
            return Err(protocol(op, "empty reply".into()));
        }
        let code = match items.remove(0) {
            Value::Int(c) => c,
            other => return Err(protocol(op, format!("code is not an integer: {other:?}"))),
        };
        Ok(Self {
            op,
            code,
            fields: items,
        })
    }

    pub(crate) fn int(&self, i: usize) -> Result<i64, StockError> {
        match self.fields.get(i) {
            Some(Value::Int(n)) => Ok(*n),
            other => Err(protocol(
                self.op,
                format!("field {i}: expected integer, got {other:?}"),
            )),
        }
    }

    pub(crate) fn text(&self, i: usize) -> Result<String, StockError> {
        match self.fields.get(i) {
            Some(Value::BulkString(b)) => String::from_utf8(b.clone())
                .map_err(|_| protocol(self.op, format!("field {i} is not UTF-8"))),
            Some(Value::SimpleString(s)) => Ok(s.clone()),
            other => Err(protocol(
                self.op,
                format!("field {i}: expected string, got {other:?}"),
            )),
        }
    }

    pub(crate) fn unexpected(&self) -> StockError {
        protocol(self.op, format!("unknown code {}", self.code))
    }
}

fn protocol(op: &'static str, detail: String) -> StockError {
    StockError::Protocol { op, detail }
}
