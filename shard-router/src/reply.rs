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

    /// An integer field converted to `T`; a value out of `T`'s range is a protocol error, not
    /// a silent wrap (a negative count must not become 4 billion units).
    pub(crate) fn num<T: TryFrom<i64>>(&self, i: usize) -> Result<T, StockError> {
        let n = self.int(i)?;
        T::try_from(n).map_err(|_| {
            protocol(
                self.op,
                format!(
                    "field {i}: {n} is out of range for {}",
                    std::any::type_name::<T>()
                ),
            )
        })
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

    /// A list field of strings (integers in it are given as their text).
    pub(crate) fn texts(&self, i: usize) -> Result<Vec<String>, StockError> {
        let Some(Value::Array(items)) = self.fields.get(i) else {
            return Err(protocol(
                self.op,
                format!("field {i}: expected a list, got {:?}", self.fields.get(i)),
            ));
        };
        items
            .iter()
            .map(|v| match v {
                Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
                Value::SimpleString(s) => Ok(s.clone()),
                Value::Int(n) => Ok(n.to_string()),
                other => Err(protocol(
                    self.op,
                    format!("field {i}: expected strings, got {other:?}"),
                )),
            })
            .collect()
    }

    pub(crate) fn unexpected(&self) -> StockError {
        protocol(self.op, format!("unknown code {}", self.code))
    }
}

fn protocol(op: &'static str, detail: String) -> StockError {
    StockError::Protocol { op, detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_count_is_a_protocol_error_not_a_wrapped_number() {
        let r = Reply::parse("claim", Value::Array(vec![Value::Int(1), Value::Int(-1)])).unwrap();
        assert!(matches!(r.num::<u32>(0), Err(StockError::Protocol { .. })));
        assert_eq!(r.num::<i32>(0).unwrap(), -1);
        let big = Reply::parse(
            "claim",
            Value::Array(vec![Value::Int(1), Value::Int(70_000)]),
        )
        .unwrap();
        assert!(big.num::<u16>(0).is_err());
        assert_eq!(big.num::<u32>(0).unwrap(), 70_000);
    }
}
