//! Why a ledger statement failed, in one place: the consumer's writer decides from it
//! whether to retry a batch, split it, or keep a row as poison (docs/DESIGN.md "Poison",
//! docs/ERRORS.md lists every error by cause).

/// What a failure says about the work that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The server's state, not the statement: read-only (a switchover), a statement killed
    /// or timed out, a table or disk full, a lost connection, a deadlock or lock wait, too
    /// many connections, a shutdown. The same work succeeds later, unchanged: retry it
    /// (bounded backoff) for as long as it takes, and give nothing up meanwhile.
    ServerState,
    /// The data of the statement: a constraint or a value the schema refuses. The same
    /// rows fail again; written alone, a row that fails this way is at fault (poison).
    RowFault,
    /// The statement itself (syntax, unknown column or table, a missing privilege, a value
    /// that does not decode): no row is at fault and nothing the server does will help; it
    /// needs a fix (code, schema, grants). Never poison: a writer stalls on it, loudly.
    Bug,
}

/// MySQL/MariaDB error numbers of [`Cause::ServerState`].
pub const SERVER_STATE: &[u16] = &[
    1021, // disk full
    1037, // out of memory
    1038, // out of sort memory
    1040, // too many connections
    1041, // out of memory
    1047, // unknown command: a Galera node not ready (WSREP)
    1053, // server shutdown in progress
    1114, // table full
    1135, // cannot create a thread
    1152, // connection aborted
    1158, // network read error
    1159, // network read timeout
    1160, // network write error
    1161, // network write timeout
    1180, // error during commit (storage engine)
    1203, // too many connections for the user
    1205, // lock wait timeout
    1213, // deadlock
    1223, // blocked by a global read lock (FLUSH TABLES WITH READ LOCK)
    1290, // --read-only (and other server options refusing the statement)
    1317, // query interrupted (KILL QUERY)
    1615, // prepared statement needs re-preparing
    1637, // too many active concurrent transactions
    1792, // read-only transaction
    1836, // read-only mode
    1927, // connection killed (MariaDB)
    1969, // max_statement_time exceeded (MariaDB)
    2006, // server gone away
    2013, // lost connection during a query
    3024, // max_execution_time exceeded (MySQL)
    4031, // disconnected by the server (idle timeout)
];

/// MySQL/MariaDB error numbers of [`Cause::RowFault`], beside SQLSTATE classes 22 (data
/// exception) and 23 (integrity constraint), which every number below but 1364 carries.
pub const ROW_FAULT: &[u16] = &[
    1048, // column cannot be null
    1062, // duplicate key
    1264, // value out of range
    1292, // truncated or incorrect value
    1364, // field has no default value
    1366, // incorrect value for a column
    1406, // data too long
    1451, // a foreign key refuses the delete
    1452, // a foreign key refuses the row
    1690, // value out of range (arithmetic)
    3819, // check constraint (MySQL)
    4025, // check constraint (MariaDB)
];

/// The cause of a sqlx error.
pub fn of_sqlx(e: &sqlx::Error) -> Cause {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => Cause::ServerState,
        sqlx::Error::Database(db) => {
            let number = db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|m| m.number());
            of_code(number, db.code().as_deref())
        }
        _ => Cause::Bug,
    }
}

/// The cause of a server error by its number and SQLSTATE: the number first (MySQL
/// answers HY000 for most of them), then the SQLSTATE class.
pub fn of_code(number: Option<u16>, sqlstate: Option<&str>) -> Cause {
    if let Some(n) = number {
        if SERVER_STATE.contains(&n) {
            return Cause::ServerState;
        }
        if ROW_FAULT.contains(&n) {
            return Cause::RowFault;
        }
    }
    match sqlstate.map(|s| s.get(..2).unwrap_or(s)) {
        Some("40" | "08") => Cause::ServerState,
        Some("22" | "23") => Cause::RowFault,
        _ => Cause::Bug,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_state_is_never_a_row_fault() {
        for n in [
            1290, 1317, 1114, 1021, 3024, 1836, 1792, 4031, 2013, 1927, 1053, 1047,
        ] {
            assert_eq!(of_code(Some(n), Some("HY000")), Cause::ServerState, "{n}");
        }
        assert_eq!(of_code(Some(1205), Some("HY000")), Cause::ServerState);
        assert_eq!(of_code(Some(1213), Some("40001")), Cause::ServerState);
        assert_eq!(of_code(None, Some("08S01")), Cause::ServerState);
    }

    #[test]
    fn constraints_and_data_are_row_faults_and_the_rest_bugs() {
        assert_eq!(of_code(Some(1062), Some("23000")), Cause::RowFault);
        assert_eq!(of_code(Some(1406), Some("22001")), Cause::RowFault);
        assert_eq!(of_code(Some(9999), Some("22007")), Cause::RowFault);
        // Syntax (`IN ()`), unknown column, missing privilege: no row is at fault.
        for n in [1064, 1054, 1146, 1142] {
            assert_eq!(of_code(Some(n), Some("42000")), Cause::Bug, "{n}");
        }
        assert_eq!(of_code(None, None), Cause::Bug);
    }

    /// docs/ERRORS.md lists exactly these numbers, each under its cause.
    #[test]
    fn the_reference_lists_every_number() {
        let doc = include_str!("../../docs/ERRORS.md");
        let section = |title: &str| -> Vec<u16> {
            let rest = &doc[doc.find(title).expect(title)..];
            let end = rest[1..].find("\n## ").map_or(rest.len(), |i| i + 1);
            rest[..end]
                .lines()
                .filter_map(|l| l.strip_prefix("| ")?.split(' ').next()?.parse().ok())
                .collect()
        };
        assert_eq!(section("## Server state"), SERVER_STATE);
        assert_eq!(section("## Row fault"), ROW_FAULT);
    }

    #[test]
    fn no_number_is_two_causes() {
        for n in SERVER_STATE {
            assert!(!ROW_FAULT.contains(n), "{n}");
        }
    }
}
