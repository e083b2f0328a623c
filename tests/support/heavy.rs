//! One heavy area at a time in the one test binary (`tests/suite`).
//!
//! The areas were binaries once, and cargo runs test binaries one after the other: the tests of
//! two areas never overlapped. In one binary they would, and the heavy areas share what a test
//! process owns on this machine: container names carry the process id (`pgotest-act-<pid>-…` is
//! used by `workflows_act`, `loop_e2e` and both `real_host_*` areas, each removing all of them
//! when a test ends), `support::lxc::ready_base` clones from whichever base is ready (another
//! area's, which that area removes when it ends), the lxc backend's first provision may restart
//! lxc-net while another area's containers boot (src/lxc/bridge.rs), and the `ps` samplers of
//! `configure`, `share` and `control_plane` look for passwords made of the process id.
//!
//! So every test that uses real LXC containers, the real Gitea or its runner takes
//! [`area`] with its area's name first (before any lock of its own area): tests of the same area
//! still run in parallel as they did within their binary; a test of another heavy area waits
//! until the last one has ended. Tests that need none of this (fakepve, the Gitea double, act
//! without containers) take nothing and run beside any area.
//!
//! The wait has no bound of its own: it lasts as long as the other area's tests, and each of
//! those waits for what it started with a bound. Areas are admitted in no fixed order; a later
//! test of the area that holds the gate enters at once (no test ever waits for its own area, so
//! the gate cannot deadlock with an area's own locks).

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// Which area holds the gate, and how many of its tests are running.
struct State {
    area: Option<&'static str>,
    tests: usize,
}

static STATE: Mutex<State> = Mutex::new(State { area: None, tests: 0 });
static RELEASED: Condvar = Condvar::new();

/// The state, also after a test panicked while holding the lock (the state stays consistent:
/// it is only changed by the few lines below, which do not panic).
fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The gate held by one test of a heavy area; released when dropped (also when the test fails
/// and unwinds).
#[must_use = "the gate is released when this is dropped: bind it with `let _heavy = …`"]
pub struct AreaGuard;

/// Waits until no test of another heavy area runs, then admits this test of `area` (the
/// module's name, e.g. `"snapshot_lxc"`).
pub fn area(area: &'static str) -> AreaGuard {
    let mut s = state();
    while s.area.is_some_and(|held| held != area) {
        s = RELEASED.wait(s).unwrap_or_else(PoisonError::into_inner);
    }
    s.area = Some(area);
    s.tests += 1;
    AreaGuard
}

impl Drop for AreaGuard {
    fn drop(&mut self) {
        let mut s = state();
        s.tests -= 1;
        if s.tests == 0 {
            s.area = None;
            RELEASED.notify_all();
        }
    }
}
