//! A first guess of a task's duration from the node's own task history, for a wait that has
//! learned nothing yet (a runner's first run, or a runner whose cache is new every job).
//!
//! PVE lists its finished tasks (`GET /nodes/{node}/tasks`) with `starttime` and `endtime` in
//! whole UNIX seconds. One such pair says little: a task of `d` seconds that began at a uniformly
//! random point within its second shows `endtime − starttime = ⌊d⌋` with probability
//! `1 − frac(d)` and `⌊d⌋ + 1` with probability `frac(d)`, so a listed duration `D` has the
//! likelihood `max(0, 1 − |d − D|)` (a triangle one second wide on each side). Several of them
//! narrow it down: two listed durations `D` and `D + 1` leave only `(D, D + 1)`. But the start
//! phases are not always random — runs started by a script one after another begin at about the
//! same point of their second, and then every one of them lists the same `D` — so the product of
//! the triangles is tempered to count as at most two tasks: it keeps to where all listed
//! durations agree without growing more certain inside that than two tasks could make it.
//! [`Prior::from_whole_seconds`] computes that posterior on a grid (blended with a flat floor, so
//! that tasks of one type with different durations — another template, a busy disk — widen it
//! instead of ruling everything out) and places poll points at its quantiles: each point is
//! equally likely to be the first one after the task's end, which spends the polls where the end
//! is likely rather than evenly. [`super::task_wait::PollSchedule::from_prior`] uses them.

use std::time::Duration;

/// Weight of the flat floor in each listed duration's likelihood.
const FLOOR: f64 = 0.05;
/// The listed durations count as this many independent tasks at most (see the module docs).
const EFFECTIVE: f64 = 2.0;
/// Grid points at most.
const GRID: usize = 2000;
/// The posterior mass left out below the first and above the last poll point.
const TAIL: f64 = 0.005;

/// Poll points for a task whose duration is guessed from the node's history (seconds since the
/// wait started, ascending, at least 5 ms apart), with the guessed range they cover.
#[derive(Debug, Clone, PartialEq)]
pub struct Prior {
    /// Below this the task is very unlikely to end (the posterior's 0.5 % quantile).
    pub lo: Duration,
    /// Above this it is very unlikely to still run (the 99.5 % quantile).
    pub hi: Duration,
    /// Where to poll: the posterior's `(j − ½) / k` quantiles, `j = 1 … k`.
    pub points: Vec<Duration>,
}

impl Prior {
    /// The prior of a task type whose past successful runs the node lists with `durations`
    /// (`endtime − starttime`, whole seconds), with at most `max_points` poll points (≥ 1).
    /// `None` without durations, or when they span more than an hour (nothing to aim at).
    pub fn from_whole_seconds(durations: &[u64], max_points: usize) -> Option<Prior> {
        let (&min, &max) = (durations.iter().min()?, durations.iter().max()?);
        if max - min > 3600 {
            return None;
        }
        let a = min.saturating_sub(1) as f64;
        let b = (max + 1) as f64;
        let step = ((b - a) / GRID as f64).max(0.005);
        let n = ((b - a) / step).ceil() as usize + 1;
        let flat = FLOOR / (b - a);
        let grid: Vec<f64> = (0..n).map(|i| a + i as f64 * step).collect();
        let temper = (EFFECTIVE / durations.len() as f64).min(1.0);
        let log_post: Vec<f64> = grid
            .iter()
            .map(|&d| {
                temper
                    * durations
                        .iter()
                        .map(|&big_d| ((1.0 - FLOOR) * (1.0 - (d - big_d as f64).abs()).max(0.0) + flat).ln())
                        .sum::<f64>()
            })
            .collect();
        let top = log_post.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = log_post.iter().map(|l| (l - top).exp()).collect();
        let total: f64 = weights.iter().sum();
        if !total.is_finite() || total <= 0.0 {
            return None;
        }
        let mut cdf = Vec::with_capacity(n);
        let mut acc = 0.0;
        for w in &weights {
            acc += w / total;
            cdf.push(acc);
        }
        let quantile = |q: f64| grid[cdf.iter().position(|&c| c >= q).unwrap_or(n - 1)];
        let k = max_points.max(1);
        let mut points: Vec<Duration> = Vec::with_capacity(k);
        for j in 1..=k {
            let q = TAIL + (1.0 - 2.0 * TAIL) * (j as f64 - 0.5) / k as f64;
            let p = Duration::from_secs_f64(quantile(q));
            if points.last().is_none_or(|last| p >= *last + Duration::from_millis(5)) {
                points.push(p);
            }
        }
        Some(Prior {
            lo: Duration::from_secs_f64(quantile(TAIL)),
            hi: Duration::from_secs_f64(quantile(1.0 - TAIL)),
            points,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    #[test]
    fn nothing_listed_is_no_prior() {
        assert_eq!(Prior::from_whole_seconds(&[], 8), None);
        assert_eq!(Prior::from_whole_seconds(&[1, 7200], 8), None);
    }

    #[test]
    fn one_listed_duration_spans_a_second_either_side() {
        let p = Prior::from_whole_seconds(&[10], 8).unwrap();
        assert!(secs(p.lo) > 9.0 && secs(p.lo) < 9.2, "{p:?}");
        assert!(secs(p.hi) > 10.8 && secs(p.hi) < 11.0, "{p:?}");
        assert_eq!(p.points.len(), 8);
        assert!(p.points.windows(2).all(|w| w[0] < w[1]));
        // The triangle peaks at 10: the middle points crowd around it.
        assert!(secs(p.points[3]) > 9.7 && secs(p.points[4]) < 10.3, "{p:?}");
    }

    #[test]
    fn listed_durations_that_differ_keep_it_between_them() {
        // A 13.3 s task: seven of ten runs show 13, three show 14. Only (13, 14) fits both.
        let listed = [13, 14, 13, 13, 14, 13, 13, 14, 13, 13];
        let p = Prior::from_whole_seconds(&listed, 8).unwrap();
        assert!(secs(p.lo) > 12.0 && secs(p.hi) < 14.5, "{p:?}");
        assert!(p.points.iter().filter(|x| secs(**x) > 13.0 && secs(**x) < 14.0).count() >= 6, "{p:?}");
        // Three of ten showing 14: more of the points below 13.5 than above.
        assert!(p.points.iter().filter(|x| secs(**x) < 13.5).count() >= 4, "{p:?}");
    }

    #[test]
    fn many_equal_durations_do_not_make_it_narrower_than_two_would() {
        // Runs started one after another at the same phase list 1 s for a 1.3 s task every time:
        // the prior must still reach well beyond 1.3 s.
        let p = Prior::from_whole_seconds(&[1; 20], 8).unwrap();
        assert!(secs(p.hi) > 1.5, "{p:?}");
        assert_eq!(p, Prior::from_whole_seconds(&[1, 1], 8).unwrap());
    }

    #[test]
    fn durations_that_no_single_task_explains_still_give_a_prior() {
        // Two kinds of run (another template, say): the floor keeps both possible.
        let p = Prior::from_whole_seconds(&[5, 5, 9, 9], 6).unwrap();
        assert!(secs(p.lo) < 5.5 && secs(p.hi) > 8.5, "{p:?}");
    }

    #[test]
    fn short_tasks_keep_their_points_apart() {
        let p = Prior::from_whole_seconds(&[0, 0, 0, 0, 0, 0], 40).unwrap();
        assert!(p.points.windows(2).all(|w| w[1] >= w[0] + Duration::from_millis(5)), "{p:?}");
        assert!(secs(p.hi) < 1.0);
    }
}
