//! A first guess of a task's duration from the node's own task history, for a wait that has
//! learned nothing yet (a runner's first run, or a runner whose cache is new every job).
//!
//! PVE lists its finished tasks (`GET /nodes/{node}/tasks`) with `starttime` and `endtime` in
//! whole UNIX seconds. One such pair says little: a task of `d` seconds that began at a uniformly
//! random point within its second shows `endtime − starttime = ⌊d⌋` with probability
//! `1 − frac(d)` and `⌊d⌋ + 1` with probability `frac(d)`, so a listed duration `D` has the
//! likelihood `max(0, 1 − |d − D|)` (a triangle one second wide on each side). Several of them
//! narrow it down: listed durations `D` and `D + 1` leave only `(D, D + 1)`, and how often each
//! appears says where inside it (a 13.3 s task lists 14 about three times in ten).
//!
//! Two cautions keep the guess honest. Runs started one after another can begin at about the
//! same point of their second, and then every one of them lists the same `D` whatever the
//! fraction: while all listed durations agree, their product is tempered to count as two tasks.
//! Once they differ, the start phases evidently vary, and up to eight count — not more, because
//! tasks of one type vary a little (a busy disk), and the guess is for the next task, not for
//! the average. A flat floor keeps durations that no single task explains (another template)
//! possible instead of ruling everything out.
//!
//! [`Posterior::from_whole_seconds`] computes that posterior on a grid; [`Posterior::prior`]
//! places the poll points. With only "running" or "stopped" to learn from, a wait's polls are a
//! fixed sequence until the first finds the task stopped, so the best sequence can be computed
//! up front: it minimises the expected lateness (from the task's end to the poll that sees it)
//! plus [`poll_cost`] per expected poll, under the wait's poll bound (poll `m` not before
//! `(m − 4) / 2` s). A dynamic program over a grid finds it exactly; the points come out
//! denser where the end is likely and still cover the tails, and fewer where a poll saves less
//! than it costs. [`super::task_wait::PollSchedule::from_prior`] polls them.

use std::time::Duration;

/// Weight of the flat floor in each listed duration's likelihood.
const FLOOR: f64 = 0.05;
/// Listed durations that all agree count as this many tasks at most (see the module docs).
const EFFECTIVE_AGREEING: f64 = 2.0;
/// Listed durations that differ count as this many tasks at most.
const EFFECTIVE_MAX: f64 = 8.0;
/// Grid points of the posterior at most.
const GRID: usize = 2000;
/// Grid points of the placement at most (its cost grows with their square).
const PLACES: usize = 240;
/// The posterior mass left out below `lo` and above `hi`.
const TAIL: f64 = 0.005;
/// What one poll is worth, as a share of the guessed duration: a point that saves less expected
/// lateness than this is not placed. 0.2 %: the order of a learned interval (0.25 %,
/// [`super::task_wait`]), so that a cold wait costs about the polls of a learning one.
pub const POLL_COST: f64 = 0.002;
/// What one poll is worth at least (seconds): about what a request costs the client and PVE
/// together, so that short tasks are not polled more densely than a poll is worth.
pub const MIN_POLL_COST: f64 = 0.002;

/// What one poll of a task expected to take `secs` seconds is worth, in seconds of lateness:
/// [`POLL_COST`] × `secs`, at least [`MIN_POLL_COST`].
pub fn poll_cost(secs: f64) -> f64 {
    (POLL_COST * secs).max(MIN_POLL_COST)
}

/// The posterior of a task type's duration given the whole-second durations the node lists
/// (seconds, on a uniform grid).
#[derive(Debug, Clone)]
pub struct Posterior {
    /// The first grid point (seconds).
    start: f64,
    /// Between grid points (seconds, at least 5 ms).
    step: f64,
    /// Cumulative probability up to and including each grid point.
    cdf: Vec<f64>,
    /// Cumulative first moment (Σ p·d, seconds) up to and including each grid point.
    moment: Vec<f64>,
}

/// Poll points for a task whose duration is guessed from the node's history (seconds since the
/// wait started, ascending, at least 5 ms apart), with the guessed range they cover.
#[derive(Debug, Clone, PartialEq)]
pub struct Prior {
    /// Below this the task is very unlikely to end (the posterior's 0.5 % quantile).
    pub lo: Duration,
    /// Above this it is very unlikely to still run (the 99.5 % quantile): the wait's target.
    pub hi: Duration,
    /// Where to poll before `hi`, all within `[lo, hi)`; possibly none.
    pub points: Vec<Duration>,
}

impl Posterior {
    /// The posterior of a task type whose past successful runs the node lists with `durations`
    /// (`endtime − starttime`, whole seconds). `None` without durations, or when they span more
    /// than an hour (nothing to aim at).
    pub fn from_whole_seconds(durations: &[u64]) -> Option<Posterior> {
        let (&min, &max) = (durations.iter().min()?, durations.iter().max()?);
        if max - min > 3600 {
            return None;
        }
        let a = min.saturating_sub(1) as f64;
        let b = (max + 1) as f64;
        let step = ((b - a) / GRID as f64).max(0.005);
        let n = ((b - a) / step).ceil() as usize + 1;
        let flat = FLOOR / (b - a);
        let effective = if min == max { EFFECTIVE_AGREEING } else { EFFECTIVE_MAX };
        let temper = (effective / durations.len() as f64).min(1.0);
        let log_post: Vec<f64> = (0..n)
            .map(|i| {
                let d = a + i as f64 * step;
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
        let (mut cdf, mut moment) = (Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut c, mut m) = (0.0, 0.0);
        for (i, w) in weights.iter().enumerate() {
            c += w / total;
            m += w / total * (a + i as f64 * step);
            cdf.push(c);
            moment.push(m);
        }
        Some(Posterior { start: a, step, cdf, moment })
    }

    /// The smallest grid point whose cumulative probability reaches `q` (seconds).
    fn quantile(&self, q: f64) -> f64 {
        let i = self.cdf.partition_point(|&c| c < q).min(self.cdf.len() - 1);
        self.start + i as f64 * self.step
    }

    /// `(P(d ≤ t), E[d; d ≤ t])` at `t` seconds (the grid point at or below `t`).
    fn at(&self, t: f64) -> (f64, f64) {
        let i = ((t - self.start) / self.step).floor();
        if i < 0.0 {
            return (0.0, 0.0);
        }
        let i = (i as usize).min(self.cdf.len() - 1);
        (self.cdf[i], self.moment[i])
    }

    /// The posterior's 0.5 % quantile: the guessed range's lower end.
    pub fn lo(&self) -> Duration {
        Duration::from_secs_f64(self.quantile(TAIL))
    }

    /// The posterior's 99.5 % quantile: the guessed range's upper end.
    pub fn hi(&self) -> Duration {
        Duration::from_secs_f64(self.quantile(1.0 - TAIL))
    }

    /// The poll points before [`Posterior::hi`] (where the wait's target poll goes) that
    /// minimise the expected lateness plus [`poll_cost`]`(hi)` per expected poll (see the
    /// module docs), at most `max_points` of them, for a wait that will have polled
    /// `polls_before` times (its ticks) before the first point. Point `j` is placed no earlier
    /// than the poll bound allows poll `polls_before + j` (`4 + 2 × seconds` polls by then), and
    /// the points leave the bound room for the target by `hi`. A task later than `hi` (0.5 % of
    /// the guess) is followed within the bound after the target
    /// ([`super::task_wait::PollSchedule`]); a spare poll kept for it cost every other wait
    /// one point (`benches/cold_floor.py`, `docs/benchmarks/latency.md`).
    pub fn prior(&self, polls_before: usize, max_points: usize) -> Prior {
        let (lo, hi) = (self.quantile(TAIL), self.quantile(1.0 - TAIL));
        let step = ((hi - lo) / PLACES as f64).max(0.005);
        let places: Vec<f64> = (0..).map(|i| lo + i as f64 * step).take_while(|&t| t < hi).collect();
        let at: Vec<(f64, f64)> = places.iter().map(|&t| self.at(t)).collect();
        let (c_hi, m_hi) = self.at(hi);
        let cost = poll_cost(hi);
        let by_hi = (4.0 + 2.0 * hi).floor() as usize;
        let k = max_points.min(by_hi.saturating_sub(polls_before + 1));
        // Lateness of the ends in (places[p], t] noticed at t, and the poll at t, which is made
        // when the task ran past places[p].
        let segment = |from: Option<usize>, t: f64, (c, m): (f64, f64)| {
            let (c0, m0) = from.map_or((0.0, 0.0), |p| at[p]);
            t * (c - c0) - (m - m0) + cost * (1.0 - c0)
        };
        let allowed = |j: usize, t: f64| (polls_before + j) as f64 <= 4.0 + 2.0 * t;
        // best[j][i]: the least cost of the ends up to places[i], with its j-th point there.
        let mut best = vec![vec![f64::INFINITY; places.len()]; k + 1];
        let mut from = vec![vec![0usize; places.len()]; k + 1];
        for (i, &t) in places.iter().enumerate() {
            if allowed(1, t) && k >= 1 {
                best[1][i] = segment(None, t, at[i]);
            }
        }
        for j in 2..=k {
            for (i, &t) in places.iter().enumerate() {
                if !allowed(j, t) {
                    continue;
                }
                for p in 0..i {
                    let v = best[j - 1][p] + segment(Some(p), t, at[i]);
                    if v < best[j][i] {
                        best[j][i] = v;
                        from[j][i] = p;
                    }
                }
            }
        }
        // The target at hi ends every sequence; no point at all is a sequence too.
        let mut choice = (segment(None, hi, (c_hi, m_hi)), 0, 0);
        for (j, row) in best.iter().enumerate().skip(1) {
            for (i, &b) in row.iter().enumerate() {
                let total = b + segment(Some(i), hi, (c_hi, m_hi));
                if total < choice.0 {
                    choice = (total, j, i);
                }
            }
        }
        let (_, mut j, mut i) = choice;
        let mut points = Vec::with_capacity(j);
        while j >= 1 {
            points.push(Duration::from_secs_f64(places[i]));
            i = from[j][i];
            j -= 1;
        }
        points.reverse();
        Prior { lo: Duration::from_secs_f64(lo), hi: Duration::from_secs_f64(hi), points }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    fn prior(durations: &[u64], polls_before: usize, max_points: usize) -> Prior {
        Posterior::from_whole_seconds(durations).unwrap().prior(polls_before, max_points)
    }

    /// Expected lateness (seconds) and polls of `points` then the target at `hi`, under `post`.
    fn expected(post: &Posterior, points: &[f64], hi: f64) -> (f64, f64) {
        let (mut late, mut polls, mut prev) = (0.0, 0.0, (0.0, 0.0));
        for &t in points.iter().chain([hi].iter()) {
            let (c, m) = post.at(t);
            late += t * (c - prev.0) - (m - prev.1);
            polls += 1.0 - prev.0;
            prev = (c, m);
        }
        (late, polls)
    }

    #[test]
    fn nothing_listed_is_no_posterior() {
        assert!(Posterior::from_whole_seconds(&[]).is_none());
        assert!(Posterior::from_whole_seconds(&[1, 7200]).is_none());
    }

    #[test]
    fn one_listed_duration_spans_a_second_either_side() {
        let p = prior(&[10], 2, 8);
        assert!(secs(p.lo) > 9.0 && secs(p.lo) < 9.2, "{p:?}");
        assert!(secs(p.hi) > 10.8 && secs(p.hi) < 11.0, "{p:?}");
        assert!(p.points.len() >= 4 && p.points.len() <= 8, "{p:?}");
        assert!(p.points.windows(2).all(|w| w[0] < w[1]));
        assert!(p.points.iter().all(|t| *t >= p.lo && *t < p.hi), "{p:?}");
        // The triangle peaks at 10: more points within half a second of it than outside.
        let near = p.points.iter().filter(|t| (secs(**t) - 10.0).abs() < 0.5).count();
        assert!(2 * near > p.points.len(), "{p:?}");
    }

    #[test]
    fn listed_durations_that_differ_place_it_between_them() {
        // A 13.3 s task: seven of ten runs show 13, three show 14. Only (13, 14) fits both, and
        // the share of 14s puts it near 13.3.
        let listed = [13, 14, 13, 13, 14, 13, 13, 14, 13, 13];
        let p = prior(&listed, 2, 10);
        assert!(secs(p.lo) > 12.8 && secs(p.hi) < 14.1, "{p:?}");
        assert!(p.points.iter().all(|x| secs(*x) > 12.8 && secs(*x) < 14.0), "{p:?}");
        assert!(p.points.iter().any(|x| (secs(*x) - 13.3).abs() < 0.1), "{p:?}");
        assert!(secs(p.points[0]) < 13.3, "{p:?}");
    }

    #[test]
    fn many_equal_durations_do_not_make_it_narrower_than_two_would() {
        // Runs started one after another at the same phase list 1 s for a 1.3 s task every time:
        // the guess must still reach well beyond 1.3 s.
        let p = prior(&[1; 20], 0, 8);
        assert!(secs(p.hi) > 1.5, "{p:?}");
        assert_eq!(p, prior(&[1, 1], 0, 8));
    }

    #[test]
    fn durations_that_no_single_task_explains_still_give_a_prior() {
        // Two kinds of run (another template, say): the floor keeps both possible.
        let p = prior(&[5, 5, 9, 9], 1, 6);
        assert!(secs(p.lo) < 5.5 && secs(p.hi) > 8.5, "{p:?}");
    }

    #[test]
    fn short_tasks_keep_their_points_apart_and_within_the_poll_bound() {
        for (listed, before) in [(&[0u64, 0, 0, 0, 0, 0][..], 0), (&[1, 2, 1, 1][..], 0), (&[1, 1, 2][..], 3)] {
            let p = prior(listed, before, 40);
            assert!(p.points.windows(2).all(|w| w[1] >= w[0] + Duration::from_millis(5)), "{p:?}");
            for (j, t) in p.points.iter().enumerate() {
                assert!((before + j + 1) as f64 <= 4.0 + 2.0 * secs(*t), "point {j} of {p:?}");
            }
            // The target fits in the bound by `hi`.
            assert!((before + p.points.len() + 1) as f64 <= (4.0 + 2.0 * secs(p.hi)).floor().max(2.0), "{p:?}");
        }
        assert!(secs(prior(&[0, 0, 0, 0, 0, 0], 0, 40).hi) < 1.0);
    }

    #[test]
    fn a_short_wide_guess_uses_the_whole_bound_up_to_the_target() {
        // Every poll the bound allows by `hi` is worth more than it costs here, and none is kept
        // back beyond the target.
        for listed in [&[1u64][..], &[1, 1, 2][..], &[1, 1, 1, 2][..]] {
            let p = prior(listed, 0, 10);
            let by_hi = (4.0 + 2.0 * secs(p.hi)).floor() as usize;
            assert_eq!(p.points.len() + 1, by_hi, "{listed:?}: {p:?}");
        }
    }

    #[test]
    fn the_placement_costs_less_than_quantiles_or_even_spacing_of_as_many_points() {
        for listed in [&[1u64][..], &[1, 2, 1, 1, 1, 2, 1], &[13], &[13, 14, 13, 13, 14], &[5, 5, 9, 9]] {
            let post = Posterior::from_whole_seconds(listed).unwrap();
            let p = post.prior(0, 10);
            let (lo, hi) = (secs(p.lo), secs(p.hi));
            let n = p.points.len();
            let cost = |points: &[f64]| {
                let (late, polls) = expected(&post, points, hi);
                late + poll_cost(hi) * polls
            };
            let ours: Vec<f64> = p.points.iter().map(|t| secs(*t)).collect();
            let quantiles: Vec<f64> =
                (1..=n).map(|j| post.quantile(TAIL + (1.0 - 2.0 * TAIL) * (j as f64 - 0.5) / n as f64)).collect();
            let even: Vec<f64> = (1..=n).map(|j| lo + (hi - lo) * j as f64 / (n + 1) as f64).collect();
            // Within a grid step of the best (the comparison points are off the grid).
            let slack = 0.005 + (hi - lo) / PLACES as f64;
            assert!(cost(&ours) <= cost(&quantiles) + slack, "{listed:?}: {ours:?} vs {quantiles:?}");
            assert!(cost(&ours) <= cost(&even) + slack, "{listed:?}: {ours:?} vs {even:?}");
            // And it beats no points at all: the wait does not just sit until `hi`.
            assert!(n > 0 && cost(&ours) < cost(&[]), "{listed:?}");
        }
    }

    #[test]
    fn a_long_task_gets_fewer_points_than_the_bound_allows() {
        // 13 s with a second either side: 30 polls would fit the bound, a handful are worth it.
        let p = prior(&[13, 14, 13], 2, 10);
        assert!(!p.points.is_empty() && p.points.len() < 10, "{p:?}");
    }
}
