//! The expected lateness of the client's cold poll placement in the model of
//! `benches/cold_floor.py` (no traffic: it computes), for comparison with that script's floors.
//!
//! `cargo bench --bench cold_rule -- [DURATION=1.3] [ROUNDS=8]`
//!
//! A task of `d` seconds lists `⌊d⌋ + 1` with probability `frac(d)`, else `⌊d⌋` (module docs of
//! `src/pve/task_prior.rs`). For n = 1 … ROUNDS listed tasks and every outcome of the listing,
//! the points of [`Posterior::prior`] (no ticks before them, as for a task of a few seconds) and
//! the target at `hi` are polled; after the target, one poll every 10 ms (more than the bound
//! allows, so the figures flatter a task later than `hi`, which these durations never are). The
//! lateness is averaged over true durations within ±0.1 s of DURATION, weighted by the
//! probability of each listing. Prints Markdown, lateness in milliseconds.

use proxmox_gitops::pve::task_prior::Posterior;

/// The probability of the listed whole-second durations for a task of `d` seconds.
fn listing_probability(listed: &[u64], d: f64) -> f64 {
    listed.iter().map(|&big_d| (1.0 - (d - big_d as f64).abs()).max(0.0)).product()
}

/// The number of ways to choose `k` of `n`.
fn choose(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |a, i| a * (n - i) as f64 / (i + 1) as f64)
}

/// Expected lateness (seconds) of the rule with `n` listed tasks, for durations near `duration`.
fn lateness(duration: f64, n: usize) -> f64 {
    let whole = duration.floor() as u64;
    let truths: Vec<f64> = (0..21).map(|i| duration - 0.1 + 0.01 * f64::from(i)).collect();
    let mut risk = 0.0;
    for up in 0..=n {
        let listed: Vec<u64> = std::iter::repeat_n(whole, n - up).chain(std::iter::repeat_n(whole + 1, up)).collect();
        let Some(posterior) = Posterior::from_whole_seconds(&listed) else { continue };
        let prior = posterior.prior(0, 10);
        let hi = prior.hi.as_secs_f64();
        let polls: Vec<f64> = prior.points.iter().map(|p| p.as_secs_f64()).chain([hi]).collect();
        for &d in &truths {
            let noticed = polls.iter().copied().find(|&t| t >= d).unwrap_or(hi + ((d - hi) / 0.01).ceil() * 0.01);
            risk += choose(n, up) * listing_probability(&listed, d) * (noticed - d) / truths.len() as f64;
        }
    }
    risk
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let duration = args.first().and_then(|a| a.parse().ok()).unwrap_or(1.3);
    let rounds = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(8usize);
    println!("| listed tasks | the client's cold placement |");
    println!("|---|---|");
    let mut sum = 0.0;
    for n in 1..=rounds {
        let l = lateness(duration, n);
        sum += l;
        println!("| {n} | {:.1} ms |", l * 1000.0);
    }
    println!("| mean of 1–{rounds} | {:.1} ms |", sum / rounds as f64 * 1000.0);
}
