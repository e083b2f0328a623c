//! Progress for parallel work and long waits (PVE tasks, template downloads, SSH waits).
//!
//! In an interactive terminal one display (indicatif's `MultiProgress`, shared by the whole
//! process) shows an overall line per run of parallel work ([`Overall`]: `deploy 3/8
//! containers [12s]`) and, below it, one spinner per wait in progress ([`Wait`]: what is waited
//! for, its state and for how long). Log lines are printed above the bars ([`LogWriter`], the
//! writer of the tracing subscriber), so the bars of containers running at the same time and the
//! log never garble each other.
//!
//! When stderr is not a terminal, under Actions, or with `CI` set, there is no display: only
//! state *changes* of waits are logged, one line each, so CI logs stay readable.

use std::io::{IsTerminal, Write};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Whether progress is drawn: stderr is a terminal, and neither Actions nor `CI` is set.
fn interactive() -> bool {
    std::io::stderr().is_terminal() && !crate::actions::in_actions() && std::env::var_os("CI").is_none()
}

/// The process's one display, when [`interactive`] (decided once).
fn display() -> Option<&'static MultiProgress> {
    static DISPLAY: OnceLock<Option<MultiProgress>> = OnceLock::new();
    DISPLAY.get_or_init(|| interactive().then(MultiProgress::new)).as_ref()
}

/// A wait in progress. Dropping it without [`Wait::finish`] clears the spinner silently.
pub struct Wait {
    bar: Option<ProgressBar>,
    what: String,
    last: String,
    started: Instant,
}

impl Wait {
    /// Starts waiting for `what` (e.g. "CT 101: create (UPID:pve1:…)").
    pub fn start(what: impl Into<String>) -> Self {
        Self::start_on(display(), what.into(), true)
    }

    /// [`Wait::start`], for a wait that began at `started` (before its first state was worth
    /// showing): [`Wait::finish`] counts from then, so its "after N s" is the whole wait.
    pub fn since(what: impl Into<String>, started: Instant) -> Self {
        let mut wait = Self::start(what);
        wait.started = started;
        wait
    }

    /// [`Wait::start`] on `display` (`None`: log the states instead); `tick`: the spinner turns
    /// on its own (not in tests, whose draws must not depend on time).
    fn start_on(display: Option<&MultiProgress>, what: String, tick: bool) -> Self {
        let bar = match display {
            Some(multi) => {
                let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
                bar.set_style(
                    ProgressStyle::with_template("  {spinner} {msg} [{elapsed}]")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_message(crate::error::terminal_safe_line(&what).into_owned());
                let bar = multi.add(bar);
                bar.tick();
                if tick {
                    bar.enable_steady_tick(Duration::from_millis(120));
                }
                Some(bar)
            }
            None => {
                tracing::info!("{what}: waiting");
                None
            }
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
            Some(bar) => {
                bar.set_message(crate::error::terminal_safe_line(&format!("{}: {state}", self.what)).into_owned())
            }
            None => tracing::info!("{}: {state}", self.what),
        }
    }

    /// Time since the wait started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Ends the wait with a final state (e.g. "OK").
    pub fn finish(mut self, outcome: &str) {
        let secs = self.started.elapsed().as_secs_f64();
        clear(self.bar.take());
        tracing::info!("{}: {outcome} after {secs:.1}s", self.what);
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        clear(self.bar.take());
    }
}

/// Clears `bar`: a finished and cleared bar takes no line of its display any more.
fn clear(bar: Option<ProgressBar>) {
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

/// The overall line of one run of parallel work over containers: `WHAT DONE/TOTAL containers
/// [elapsed]`, on top of the waits of the containers in flight. Nothing is drawn when not
/// `interactive` (each container's result is logged by its step), nor for a single container
/// (a deploy's per-container steps run their own work on one container). Cleared when dropped.
pub struct Overall {
    bar: Option<ProgressBar>,
    failed: std::sync::atomic::AtomicUsize,
}

impl Overall {
    /// Starts the line for `total` containers; `what` names the work (`deploy`, `provision`).
    pub fn start(what: &str, total: usize) -> Self {
        Self::start_on(display(), what, total, true)
    }

    /// [`Overall::start`] on `display` (`None`: nothing is drawn); `tick` as for [`Wait`].
    fn start_on(display: Option<&MultiProgress>, what: &str, total: usize, tick: bool) -> Self {
        let bar = display.filter(|_| total > 1).map(|multi| {
            let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::hidden());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix} {pos}/{len} containers [{elapsed}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_prefix(what.to_string());
            let bar = multi.add(bar);
            bar.tick();
            if tick {
                bar.enable_steady_tick(Duration::from_millis(120));
            }
            bar
        });
        Overall { bar, failed: Default::default() }
    }

    /// One more container is done; `failed` counts it in the line's `N failed`.
    pub fn done(&self, failed: bool) {
        if let Some(bar) = &self.bar {
            if failed {
                let n = self.failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                bar.set_message(format!("{n} failed"));
            }
            bar.inc(1);
        }
    }
}

impl Drop for Overall {
    fn drop(&mut self) {
        clear(self.bar.take());
    }
}

/// The writer of the log (see `cli::init_logging`): stderr, with the progress display suspended
/// while a line is written, so that log lines appear above the bars instead of through them.
pub struct LogWriter;

impl LogWriter {
    /// A writer for one log event (a `tracing_subscriber` `MakeWriter`).
    pub fn make() -> LogWriter {
        LogWriter
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match display() {
            Some(multi) => multi.suspend(|| std::io::stderr().lock().write_all(buf)),
            None => std::io::stderr().lock().write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use indicatif::{MultiProgress, ProgressDrawTarget, TermLike};

    use super::{Overall, Wait};

    /// A terminal screen of width [`WIDTH`] as indicatif draws on it: lines of characters, a
    /// cursor (row, column), and a terminal's deferred auto-wrap at the right edge.
    #[derive(Debug, Default, Clone)]
    struct Screen(Arc<Mutex<Cells>>);

    /// The screen's lines of characters and its cursor (row, column).
    type Cells = (Vec<Vec<char>>, usize, usize);

    const WIDTH: usize = 100;

    impl Screen {
        /// The non-blank lines, right-trimmed.
        fn lines(&self) -> Vec<String> {
            let s = self.0.lock().unwrap();
            s.0.iter().map(|l| l.iter().collect::<String>().trim_end().to_string()).filter(|l| !l.is_empty()).collect()
        }
        fn with(&self, f: impl FnOnce(&mut Vec<Vec<char>>, &mut usize, &mut usize)) {
            let mut s = self.0.lock().unwrap();
            let (lines, row, col) = &mut *s;
            f(lines, row, col)
        }
        fn put(&self, text: &str) {
            self.with(|lines, row, col| {
                for c in text.chars() {
                    match c {
                        '\r' => *col = 0,
                        '\n' => (*row, *col) = (*row + 1, 0),
                        c => {
                            if *col == WIDTH {
                                (*row, *col) = (*row + 1, 0);
                            }
                            while lines.len() <= *row {
                                lines.push(Vec::new());
                            }
                            let line = &mut lines[*row];
                            while line.len() <= *col {
                                line.push(' ');
                            }
                            line[*col] = c;
                            *col += 1;
                        }
                    }
                }
            });
        }
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            WIDTH as u16
        }
        fn move_cursor_up(&self, n: usize) -> std::io::Result<()> {
            self.with(|_, row, _| *row = row.saturating_sub(n));
            Ok(())
        }
        fn move_cursor_down(&self, n: usize) -> std::io::Result<()> {
            self.with(|_, row, _| *row += n);
            Ok(())
        }
        fn move_cursor_right(&self, n: usize) -> std::io::Result<()> {
            self.with(|_, _, col| *col = (*col + n).min(WIDTH));
            Ok(())
        }
        fn move_cursor_left(&self, n: usize) -> std::io::Result<()> {
            self.with(|_, _, col| *col = col.saturating_sub(n));
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.put(s);
            self.put("\n");
            Ok(())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.put(s);
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            self.with(|lines, row, col| {
                if let Some(l) = lines.get_mut(*row) {
                    l.clear();
                }
                *col = 0;
            });
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The overall line on top, one line per wait below it, each wait on its own line whatever
    /// the order of updates; a finished wait leaves no line; a log line written while the
    /// display is suspended lands above the bars.
    #[test]
    fn overall_line_and_waits_each_keep_their_line() {
        let screen = Screen::default();
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::term_like(Box::new(screen.clone())));
        let overall = Overall::start_on(Some(&multi), "deploy", 8, false);
        let mut a = Wait::start_on(Some(&multi), "CT 101: create (UPID:pve1:1)".into(), false);
        let b = Wait::start_on(Some(&multi), "CT 102: start (UPID:pve1:2)".into(), false);
        overall.done(false);
        overall.done(false);
        overall.done(true);
        a.state("running");
        multi.suspend(|| screen.write_line("INFO broker: plan: nothing").unwrap());
        let lines = screen.lines();
        let at =
            |text: &str| lines.iter().position(|l| l.contains(text)).unwrap_or_else(|| panic!("{text}: {lines:#?}"));
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(at("INFO broker: plan: nothing") < at("deploy 3/8 containers"), "{lines:#?}");
        assert!(lines[at("deploy 3/8 containers")].ends_with("1 failed"), "{lines:#?}");
        assert!(at("deploy 3/8 containers") < at("CT 101: create (UPID:pve1:1): running"), "{lines:#?}");
        assert!(at("CT 101: create") < at("CT 102: start"), "{lines:#?}");
        assert!(lines.iter().all(|l| l.matches("CT 10").count() <= 1), "{lines:#?}");
        a.finish("OK");
        let lines = screen.lines();
        assert!(!lines.iter().any(|l| l.contains("CT 101")), "{lines:#?}");
        assert!(lines.iter().any(|l| l.contains("CT 102: start")), "{lines:#?}");
        drop(b);
        drop(overall);
        let lines = screen.lines();
        assert_eq!(lines, ["INFO broker: plan: nothing"], "{lines:#?}");
    }

    #[test]
    fn nothing_is_drawn_without_a_display() {
        let overall = Overall::start_on(None, "deploy", 8, false);
        overall.done(true);
        assert!(overall.bar.is_none());
        let w = Wait::start_on(None, "CT 101: create".into(), false);
        assert!(w.bar.is_none());
        // A single container gets no overall line (its step's own waits show it).
        let screen = Screen::default();
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::term_like(Box::new(screen)));
        assert!(Overall::start_on(Some(&multi), "deploy", 1, false).bar.is_none());
    }
}
