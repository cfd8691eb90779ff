//! Where the CPU goes: each process's CPU time (user + system, all threads) over a load run,
//! per answer. On a box where the load generator, the gateway and Redis share the cores,
//! "µs of CPU per claim, by process" is what capacity planning needs, and it explains a
//! throughput ratio that wall-clock figures alone cannot.

use serde::{Deserialize, Serialize};

/// Linux reports `utime`/`stime` in USER_HZ ticks, fixed at 100 for user space.
const TICKS_PER_S: f64 = 100.0;

/// What a process does in the run: the capacity plan sums CPU by role, so a replica is
/// never counted as a master because both are `redis-server`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    LoadGenerator,
    ExternalClient,
    Baseline,
    Gateway,
    Consumer,
    Mariadb,
    RedisMaster,
    RedisReplica,
    /// Reports written before roles were recorded.
    #[default]
    Unknown,
}

/// A process to account for; `pid: None` is this process (the load generator).
#[derive(Debug, Clone)]
pub struct Watched {
    pub name: String,
    pub role: Role,
    pub pid: Option<u32>,
}

impl Watched {
    pub fn new(role: Role, name: impl Into<String>, pid: u32) -> Self {
        Self {
            name: name.into(),
            role,
            pid: Some(pid),
        }
    }

    pub fn load_generator() -> Self {
        Self {
            name: "load generator (bench)".into(),
            role: Role::LoadGenerator,
            pid: None,
        }
    }
}

/// One process's CPU over a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuUse {
    pub process: String,
    #[serde(default)]
    pub role: Role,
    pub cpu_s: f64,
    /// CPU µs per answer (warm-up included, like the CPU time).
    pub us_per_answer: f64,
}

/// CPU seconds used so far by `pid` (this process when `None`), all threads, those that
/// exited included; `None` when unreadable (process gone).
///
/// Read from the process's CPU-time clock (`clock_getcpuclockid(3)`), which the kernel
/// keeps in nanoseconds: `/proc/<pid>/stat` counts 10 ms ticks, so a rush of 5 000
/// answers in 0.1 s read from it moves in steps of 2 µs per answer. The ticks remain the
/// fallback where the clock cannot be had.
pub fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    clock_seconds(pid).or_else(|| stat_seconds(pid))
}

fn clock_seconds(pid: Option<u32>) -> Option<f64> {
    use nix::time::{clock_getcpuclockid, ClockId};
    use nix::unistd::Pid;
    let clock = match pid {
        Some(p) => clock_getcpuclockid(Pid::from_raw(i32::try_from(p).ok()?)).ok()?,
        None => ClockId::CLOCK_PROCESS_CPUTIME_ID,
    };
    let t = clock.now().ok()?;
    Some(t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
}

fn stat_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    parse_stat(&std::fs::read_to_string(path).ok()?)
}

/// `utime + stime` of a `/proc/<pid>/stat` line, in seconds. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its closing `)`.
fn parse_stat(line: &str) -> Option<f64> {
    let rest = &line[line.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_S)
}

/// CPU readings taken before a run, to be closed after it.
pub struct Sampler {
    start: Vec<(Watched, Option<f64>)>,
}

impl Sampler {
    pub fn start(procs: Vec<Watched>) -> Self {
        let start = procs
            .into_iter()
            .map(|w| {
                let t = cpu_seconds(w.pid);
                (w, t)
            })
            .collect();
        Self { start }
    }

    /// Each process's CPU since [`Sampler::start`]; processes that could not be read
    /// at both ends are left out.
    pub fn finish(self, answers: u64) -> Vec<CpuUse> {
        self.start
            .into_iter()
            .filter_map(|(w, before)| {
                let used = cpu_seconds(w.pid)? - before?;
                Some(CpuUse {
                    process: w.name,
                    role: w.role,
                    cpu_s: used,
                    us_per_answer: if answers > 0 {
                        used * 1e6 / answers as f64
                    } else {
                        0.0
                    },
                })
            })
            .collect()
    }
}

/// CPU µs per answer of every process in `role`.
pub fn us_per_answer_of(uses: &[CpuUse], role: Role) -> f64 {
    uses.iter()
        .filter(|u| u.role == role)
        .map(|u| u.us_per_answer)
        .sum()
}

/// CPU µs per answer over every accounted process.
pub fn total_us_per_answer(uses: &[CpuUse]) -> f64 {
    uses.iter().map(|u| u.us_per_answer).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        let line =
            "4242 (a (weird) name) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 150 0 0 20 0 3 0";
        assert_eq!(parse_stat(line), Some(4.0));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn the_clock_agrees_with_the_ticks_and_is_finer() {
        // Another process's clock (this test's parent is as good as any live process).
        let pid = std::os::unix::process::parent_id();
        let (clock, ticks) = (clock_seconds(Some(pid)), stat_seconds(Some(pid)));
        let (clock, ticks) = (clock.expect("cpu clock"), ticks.expect("/proc stat"));
        // The same quantity: ticks are the clock scaled and truncated, and the two reads
        // are not simultaneous.
        assert!(
            (clock - ticks).abs() <= 0.05_f64.max(ticks * 0.05),
            "clock {clock} vs ticks {ticks}"
        );
        // Ten readings of this busy thread: the clock moves between them, the ticks
        // (10 ms each) could not.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..10 {
            std::hint::black_box((0..20_000u64).sum::<u64>());
            seen.insert((clock_seconds(None).expect("own clock") * 1e9) as u64);
        }
        assert!(seen.len() >= 5, "{seen:?}");
    }

    #[test]
    fn own_cpu_time_grows_with_work() {
        // Spin until the reading moves by a few ticks: on a loaded machine this thread may
        // get a fraction of a core, so the bound is on CPU seen, with a generous wall limit.
        let before = cpu_seconds(None).expect("/proc/self/stat");
        let mut x = 0u64;
        let t = std::time::Instant::now();
        let mut after = before;
        while after - before < 0.05 && t.elapsed() < std::time::Duration::from_secs(20) {
            for _ in 0..1_000_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            after = cpu_seconds(None).expect("/proc/self/stat");
        }
        std::hint::black_box(x);
        assert!(after - before >= 0.05, "{before} -> {after}");
    }
}
