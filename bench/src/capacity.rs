//! The sweep's maths, pure so each rule has a unit test: which step is the knee, what one
//! gateway core and one Redis master sustained there, and how many of each a target rate
//! needs, by throughput and by measured CPU per claim.

use serde::Serialize;

use crate::report::Report;
use crate::stack::cpu::{us_per_answer_of, Role};

/// How busy a planned core may run in the "by CPU" plan: headroom for bursts and for
/// scheduler, interrupt and Redis background work.
pub const CPU_PLAN_UTILISATION: f64 = 0.7;

/// The last passing step of a sweep: the largest sustainable rate. `None` when no step
/// passed.
pub fn knee<'a>(steps: &'a [Report], passed: &[bool]) -> Option<&'a Report> {
    steps
        .iter()
        .zip(passed)
        .filter(|(_, ok)| **ok)
        .map(|(r, _)| r)
        .next_back()
}

/// What the knee says per unit of hardware.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Capacity {
    /// Throughput of the knee (answers/s); 0 when no step passed.
    pub knee_rps: f64,
    pub knee_offered_rps: f64,
    pub gateway_cores: f64,
    pub redis_masters: f64,
    pub claims_per_s_per_gateway_core: f64,
    pub claims_per_s_per_redis_master: f64,
    /// CPU µs per answer at the knee, summed over the processes of each role (0 when not
    /// measured). The MariaDB server may serve other work too: an upper bound.
    pub gateway_cpu_us: f64,
    pub redis_cpu_us: f64,
    pub consumer_cpu_us: f64,
    pub mariadb_cpu_us: f64,
}

impl Capacity {
    /// From the knee (if any) and the hardware that served it.
    pub fn at(knee: Option<&Report>, gateway_cores: f64, redis_masters: f64) -> Self {
        let rps = knee.map_or(0.0, |k| k.throughput_rps);
        let cpu = |role| knee.map_or(0.0, |k| us_per_answer_of(&k.cpu, role));
        Self {
            knee_rps: rps,
            knee_offered_rps: knee.map_or(0.0, |k| k.offered_rps),
            gateway_cores,
            redis_masters,
            claims_per_s_per_gateway_core: per(rps, gateway_cores),
            claims_per_s_per_redis_master: per(rps, redis_masters),
            gateway_cpu_us: cpu(Role::Gateway),
            // Masters only: a replica's CPU is not what serves claims.
            redis_cpu_us: cpu(Role::RedisMaster),
            consumer_cpu_us: cpu(Role::Consumer),
            mariadb_cpu_us: cpu(Role::Mariadb),
        }
    }

    /// True when both the gateway and Redis CPU were measured, so a "by CPU" plan exists.
    pub fn by_cpu(&self) -> bool {
        self.gateway_cpu_us > 0.0 && self.redis_cpu_us > 0.0
    }

    /// One row of the plan for `target` claims/s.
    pub fn plan(&self, target: f64) -> PlanRow {
        let by = |us: f64| (self.by_cpu() && us > 0.0).then(|| cores_by_cpu(target, us));
        PlanRow {
            target,
            gateway_cores: units_needed(target, self.claims_per_s_per_gateway_core),
            redis_masters: units_needed(target, self.claims_per_s_per_redis_master),
            gateway_cores_by_cpu: by(self.gateway_cpu_us),
            redis_masters_by_cpu: by(self.redis_cpu_us),
            consumer_cores_by_cpu: by(self.consumer_cpu_us),
            mariadb_cores_by_cpu: by(self.mariadb_cpu_us),
        }
    }
}

/// What one target rate needs. `None`: not measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanRow {
    pub target: f64,
    pub gateway_cores: Option<f64>,
    pub redis_masters: Option<f64>,
    pub gateway_cores_by_cpu: Option<f64>,
    pub redis_masters_by_cpu: Option<f64>,
    pub consumer_cores_by_cpu: Option<f64>,
    pub mariadb_cores_by_cpu: Option<f64>,
}

fn per(rps: f64, units: f64) -> f64 {
    if units > 0.0 {
        rps / units
    } else {
        0.0
    }
}

/// Whole units of something that sustains `per_unit`/s each, for `target`/s.
pub fn units_needed(target: f64, per_unit: f64) -> Option<f64> {
    (per_unit > 0.0).then(|| (target / per_unit).ceil())
}

/// Cores for `target` claims/s at `us` CPU µs per claim, each core planned at
/// [`CPU_PLAN_UTILISATION`].
pub fn cores_by_cpu(target: f64, us: f64) -> f64 {
    (target * us / 1e6 / CPU_PLAN_UTILISATION).ceil()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::cpu::CpuUse;

    fn step(rps: f64, cpu: &[(Role, f64)]) -> Report {
        // Any stored report will do as a frame: only the fields set below are read.
        let mut r: Report =
            serde_json::from_str(include_str!("../reference/users-5k.json")).expect("reference");
        r.throughput_rps = rps;
        r.offered_rps = rps;
        r.cpu = cpu
            .iter()
            .map(|&(role, us)| CpuUse {
                process: format!("{role:?}"),
                role,
                cpu_s: 1.0,
                us_per_answer: us,
            })
            .collect();
        r
    }

    #[test]
    fn the_knee_is_the_last_passing_step() {
        let steps = [step(1.0, &[]), step(2.0, &[]), step(3.0, &[])];
        assert_eq!(
            knee(&steps, &[true, true, false]).map(|r| r.throughput_rps),
            Some(2.0)
        );
        assert!(knee(&steps, &[false, false, false]).is_none());
    }

    #[test]
    fn a_replica_is_not_counted_as_a_master() {
        let k = step(
            10_000.0,
            &[
                (Role::RedisMaster, 4.0),
                (Role::RedisMaster, 3.0),
                (Role::RedisReplica, 2.0),
                (Role::Gateway, 20.0),
            ],
        );
        let c = Capacity::at(Some(&k), 2.0, 2.0);
        assert_eq!(c.redis_cpu_us, 7.0);
        assert_eq!(c.gateway_cpu_us, 20.0);
        assert_eq!(c.claims_per_s_per_gateway_core, 5_000.0);
    }

    #[test]
    fn the_plan_rounds_up_and_plans_cores_at_seventy_percent() {
        let k = step(10_000.0, &[(Role::RedisMaster, 7.0), (Role::Gateway, 14.0)]);
        let row = Capacity::at(Some(&k), 2.0, 1.0).plan(100_000.0);
        assert_eq!(row.gateway_cores, Some(20.0));
        assert_eq!(row.redis_masters, Some(10.0));
        // 100 000 claims/s × 14 µs = 1.4 core-seconds per second, at 70 % busy: 2 cores.
        assert_eq!(row.gateway_cores_by_cpu, Some(2.0));
        assert_eq!(row.redis_masters_by_cpu, Some(1.0));
        assert_eq!(row.consumer_cores_by_cpu, None, "consumer not measured");
    }

    #[test]
    fn no_knee_plans_nothing() {
        let c = Capacity::at(None, 2.0, 1.0);
        assert_eq!(c.knee_rps, 0.0);
        let row = c.plan(1_000.0);
        assert_eq!((row.gateway_cores, row.gateway_cores_by_cpu), (None, None));
    }
}
