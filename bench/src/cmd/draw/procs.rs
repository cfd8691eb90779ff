//! The processes of a stack bench did not start, when they run on this machine: the
//! process listening on a loopback address's port, named by `/proc/net/tcp*` and the
//! socket inodes in `/proc/<pid>/fd`. A gateway or a `redis-server` found this way has its
//! CPU sampled like a `--stack` process; anything else (a balancer) is left out.

use std::collections::{BTreeMap, BTreeSet};

use bench::stack::cpu::{Role, Watched};

/// The local gateway and Redis processes behind `urls` (`http://host:port`,
/// `redis://host:port` or `host:port`).
pub(crate) fn local(urls: &[String]) -> Vec<Watched> {
    let ports: BTreeSet<u16> = urls.iter().filter_map(|u| loopback_port(u)).collect();
    let inodes = listening_inodes(&ports);
    let mut found: BTreeMap<u32, u16> = BTreeMap::new();
    for (pid, inode) in socket_owners() {
        if let Some(port) = inodes.get(&inode) {
            found.insert(pid, *port);
        }
    }
    found
        .into_iter()
        .filter_map(|(pid, port)| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            let role = match comm.trim() {
                "gateway" => Role::Gateway,
                c if c.starts_with("redis-server") => Role::RedisMaster,
                _ => return None,
            };
            Some(Watched::new(role, format!("{} :{port}", comm.trim()), pid))
        })
        .collect()
}

/// The port of a URL whose host is loopback.
fn loopback_port(url: &str) -> Option<u16> {
    let rest = url.split("://").last()?;
    let authority = rest.split('/').next()?;
    let authority = authority.rsplit('@').next()?;
    let (host, port) = authority.rsplit_once(':')?;
    let local = matches!(host, "127.0.0.1" | "localhost" | "[::1]" | "::1");
    local.then(|| port.parse().ok()).flatten()
}

/// Socket inode → port of the LISTEN sockets on `ports`.
fn listening_inodes(ports: &BTreeSet<u16>) -> BTreeMap<u64, u16> {
    let mut out = BTreeMap::new();
    for file in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let port = f[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if let (Some(port), Ok(inode)) = (port, f[9].parse::<u64>()) {
                if ports.contains(&port) {
                    out.insert(inode, port);
                }
            }
        }
    }
    out
}

/// `(pid, socket inode)` of every socket this user may see.
fn socket_owners() -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let link = link.to_string_lossy();
            if let Some(inode) = link
                .strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse().ok())
            {
                out.push((pid, inode));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_ports() {
        assert_eq!(loopback_port("http://127.0.0.1:8080"), Some(8080));
        assert_eq!(loopback_port("redis://127.0.0.1:16379"), Some(16379));
        assert_eq!(loopback_port("127.0.0.1:7000"), Some(7000));
        assert_eq!(loopback_port("http://haproxy:8080"), None);
    }

    #[test]
    fn finds_its_own_listener_but_names_only_servers() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let inodes = listening_inodes(&BTreeSet::from([port]));
        assert_eq!(inodes.len(), 1);
        // This test binary is neither a gateway nor Redis.
        assert!(local(&[format!("http://127.0.0.1:{port}")]).is_empty());
    }
}
