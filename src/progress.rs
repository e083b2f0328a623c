//! Progress for long waits (PVE tasks, template downloads, SSH waits).
//!
//! In an interactive terminal a spinner (indicatif) shows what is being waited for and for how
//! long; when stderr is not a TTY, or under Actions, only state *changes* are logged, one line
//! each, so CI logs stay readable.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// A wait in progress. Dropping it without [`Wait::finish`] clears the spinner silently.
pub struct Wait {
    bar: Option<ProgressBar>,
    what: String,
    last: String,
    started: Instant,
}

fn interactive() -> bool {
    std::io::stderr().is_terminal() && !crate::actions::in_actions() && std::env::var_os("CI").is_none()
}

impl Wait {
    /// Starts waiting for `what` (e.g. "CT 101: create (UPID:pve1:…)").
    pub fn start(what: impl Into<String>) -> Self {
        let what = what.into();
        let bar = if interactive() {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.set_message(what.clone());
            bar.enable_steady_tick(Duration::from_millis(120));
            Some(bar)
        } else {
            tracing::info!("{what}: waiting");
            None
        };
        Wait { bar, last: String::new(), what, started: Instant::now() }
    }

    /// Reports the current state (e.g. "running"); logged only when it changed.
    pub fn state(&mut self, state: &str) {
        if state == self.last {
            return;
        }
        self.last = state.to_string();
        match &self.bar {
            Some(bar) => bar.set_message(format!("{}: {state}", self.what)),
            None => tracing::info!("{}: {state}", self.what),
        }
    }

    /// Time since the wait started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Ends the wait with a final state (e.g. "OK").
    pub fn finish(self, outcome: &str) {
        let secs = self.started.elapsed().as_secs_f64();
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        tracing::info!("{}: {outcome} after {secs:.1}s", self.what);
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
