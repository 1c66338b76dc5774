//! When a GPU worker's CPU threads may take JPEGs from the lanes' backlog:
//! only when that finishes the lanes' work sooner. The lanes time their
//! batches for it (`BatchTimer`), and `Stolen::finish` the threads'
//! samples.
//!
//! Two rules, both from measurements the runner makes as it goes:
//!
//! - **The whole host against the lanes alone.** Stealing costs the lanes
//!   something (the threads share the host's cores, caches and memory
//!   bandwidth with the lanes' host work and the network), so whether it
//!   pays depends on the machine and the workload. Time is cut into
//!   windows of [`WINDOW`]; a window either lets the threads steal or keeps
//!   them out, and counts the samples finished (by lanes and threads); a
//!   window in which a lane found the queue empty, or that spans an idle
//!   gap, is not counted. The lanes run alone first; stealing runs
//!   only once it has measured faster by a margin ([`STEAL_GAIN`], on
//!   exponentially averaged rates), and the mode not running is tried
//!   again one window in [`EXPLORE_EVERY`], so a change of workload is
//!   noticed.
//! - **The tail.** A stolen sample is the newest in the queue: the lanes
//!   would reach it after the samples ahead of it. A thread takes it only
//!   when its own measured time per sample ([`StealPolicy::stolen`]) is
//!   shorter than the lanes' time to get there (their measured rate), with
//!   a margin: the pool takes no sample it expects to finish later than
//!   the lanes would have (the rule reads the queue's length just before
//!   the steal, so threads stealing at once may each count a sample the
//!   other took).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A measuring window.
pub(super) const WINDOW: Duration = Duration::from_millis(250);
/// One window in this many runs the mode that measured slower.
pub(super) const EXPLORE_EVERY: u64 = 8;
/// Stealing runs only when it measured this much faster than the lanes
/// alone: the host is never made slower for a gain within the noise.
const STEAL_GAIN: f64 = 1.03;
/// A steal must finish this much sooner than the lanes would (a ratio).
const TAIL_MARGIN: f64 = 1.25;
/// A thread's seconds per sample before one was measured: pessimistic (a
/// 500x375 JPEG's decode and crop take about 4 ms on one core).
const UNMEASURED_CPU_SAMPLE: f64 = 0.02;
/// Weight of the newest window (or sample time) in the averages.
const ALPHA: f64 = 0.3;

/// What the runner knows of both executors, and the current window.
#[derive(Debug)]
pub(super) struct StealPolicy {
    lanes: usize,
    /// A decision fixed in advance, for tests of the routing (`None`: the
    /// rules above decide).
    fixed: Option<bool>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Samples finished per second with the threads stealing, and kept
    /// out; `None` until measured.
    rate_steal: Option<f64>,
    rate_alone: Option<f64>,
    /// A lane's seconds per sample when it never waited for work.
    lane_sample: Option<f64>,
    /// A thread's seconds per stolen sample, wall clock.
    cpu_sample: Option<f64>,
    window: Window,
    windows: u64,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    steal: bool,
    finished: u64,
    /// A lane found the queue empty during the window.
    starved: bool,
}

impl StealPolicy {
    pub(super) fn new(lanes: usize, now: Instant) -> Self {
        Self {
            lanes: lanes.max(1),
            fixed: None,
            state: Mutex::new(State {
                rate_steal: None,
                rate_alone: None,
                lane_sample: None,
                cpu_sample: None,
                // The first window keeps the threads out, the second lets
                // them steal (the tail rule still holds them back).
                window: Window {
                    started: now,
                    steal: false,
                    finished: 0,
                    starved: false,
                },
                windows: 0,
            }),
        }
    }

    /// A policy that always answers `steal` wherever the backlog is longer
    /// than the lanes keep: tests of what the pipeline does with a steal
    /// (or with none) cannot depend on wall-clock rates, which a loaded
    /// test machine turns into noise. The rules are tested below, on a
    /// synthetic clock.
    #[cfg(test)]
    pub(super) fn fixed(lanes: usize, steal: bool) -> Self {
        Self {
            fixed: Some(steal),
            ..Self::new(lanes, Instant::now())
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Plain numbers, consistent after any panic.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a thread may take the newest of `queued` waiting samples
    /// now, `keep` being the backlog the lanes always keep.
    pub(super) fn may_steal(&self, queued: usize, keep: usize, now: Instant) -> bool {
        if let Some(steal) = self.fixed {
            return steal && queued > keep;
        }
        let mut st = self.lock();
        st.roll(now);
        if queued <= keep || !st.window.steal {
            return false;
        }
        // The lanes reach the newest sample after the `queued - 1` ahead
        // of it, `lanes` at a time. Until the lanes are measured nothing is
        // taken; until a thread is, it is assumed slow.
        let Some(lane) = st.lane_sample else { return false };
        let cpu = st.cpu_sample.unwrap_or(UNMEASURED_CPU_SAMPLE);
        cpu * TAIL_MARGIN < (queued - 1) as f64 * lane / self.lanes as f64
    }

    /// A lane finished `samples` taken `elapsed` after its previous batch
    /// was taken; `waited` when it found the queue empty in between (then
    /// the interval measures the input, not the lane).
    pub(super) fn lane_batch(&self, samples: usize, elapsed: Duration, waited: bool, now: Instant) {
        let mut st = self.lock();
        // The wait happened in the window open until now: it is that
        // window's lanes that ran dry.
        if waited {
            st.window.starved = true;
        }
        st.roll(now);
        st.window.finished += samples as u64;
        if !waited && samples > 0 {
            let per = elapsed.as_secs_f64() / samples as f64;
            st.lane_sample = Some(ewma(st.lane_sample, per));
        }
    }

    /// A thread finished a stolen sample in `elapsed`.
    pub(super) fn stolen(&self, elapsed: Duration, now: Instant) {
        let mut st = self.lock();
        st.roll(now);
        st.window.finished += 1;
        st.cpu_sample = Some(ewma(st.cpu_sample, elapsed.as_secs_f64()));
    }

    /// Whether the current window lets threads steal (tests, logs).
    #[cfg(test)]
    fn stealing(&self, now: Instant) -> bool {
        let mut st = self.lock();
        st.roll(now);
        st.window.steal
    }
}

impl State {
    /// Closes the window if it is over, and opens the next one.
    fn roll(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.window.started);
        if elapsed < WINDOW {
            return;
        }
        let w = self.window;
        // A window that ran much longer than planned spans an idle gap
        // (nothing called in between): it measures the input, not the
        // executors.
        if !w.starved && w.finished > 0 && elapsed <= 2 * WINDOW {
            let rate = w.finished as f64 / elapsed.as_secs_f64();
            let slot = if w.steal {
                &mut self.rate_steal
            } else {
                &mut self.rate_alone
            };
            *slot = Some(ewma(*slot, rate));
        }
        self.windows += 1;
        let steal = match (self.rate_alone, self.rate_steal) {
            // Measure each mode once first.
            (None, _) => false,
            (_, None) => true,
            (Some(a), Some(s)) => {
                let better = s > a * STEAL_GAIN;
                if self.windows.is_multiple_of(EXPLORE_EVERY) {
                    !better
                } else {
                    better
                }
            }
        };
        if steal != w.steal {
            tracing::debug!(
                steal,
                rate_steal = self.rate_steal,
                rate_alone = self.rate_alone,
                lane_ms = self.lane_sample.map(|s| s * 1e3),
                cpu_ms = self.cpu_sample.map(|s| s * 1e3),
                "gpu worker's cpu threads: steal policy switched"
            );
        }
        // The next window starts now, whatever gap came before.
        self.window = Window {
            started: now,
            steal,
            finished: 0,
            starved: false,
        };
    }
}

fn ewma(old: Option<f64>, new: f64) -> f64 {
    old.map_or(new, |o| o + ALPHA * (new - o))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives `policy` through `windows` windows in which lanes finish
    /// `lane_rate` samples/s, plus `cpu_rate` when the threads steal.
    fn drive(policy: &StealPolicy, start: Instant, windows: u32, lane_rate: f64, cpu_rate: f64) -> (u32, Instant) {
        let mut stealing = 0;
        let mut now = start;
        for _ in 0..windows {
            let steal = policy.stealing(now);
            stealing += u32::from(steal);
            let rate = lane_rate + if steal { cpu_rate } else { 0.0 };
            let per_tick = (rate * 0.01).round() as usize;
            for _ in 0..25 {
                now += Duration::from_millis(10);
                policy.lane_batch(per_tick, Duration::from_millis(10), false, now);
            }
        }
        (stealing, now)
    }

    #[test]
    fn threads_that_slow_the_host_stay_out_after_measuring() {
        let start = Instant::now();
        let policy = StealPolicy::new(4, start);
        // Stealing costs the lanes more than the threads add.
        let (stealing, _) = drive(&policy, start, 64, 10_000.0, -1_500.0);
        assert!(
            stealing <= 64 / EXPLORE_EVERY as u32 + 2,
            "stole in {stealing} of 64 windows"
        );
    }

    #[test]
    fn threads_that_add_to_the_host_steal_most_of_the_time() {
        let start = Instant::now();
        let policy = StealPolicy::new(4, start);
        let (stealing, _) = drive(&policy, start, 64, 10_000.0, 3_000.0);
        assert!(
            stealing >= 64 - 64 / EXPLORE_EVERY as u32 - 2,
            "stole in only {stealing} of 64 windows"
        );
    }

    #[test]
    fn a_workload_change_is_noticed() {
        let start = Instant::now();
        let policy = StealPolicy::new(4, start);
        let (_, now) = drive(&policy, start, 32, 10_000.0, 3_000.0);
        let (stealing, _) = drive(&policy, now, 64, 10_000.0, -3_000.0);
        assert!(
            stealing <= 64 / 4,
            "still stealing in {stealing} of 64 windows after the change"
        );
    }

    #[test]
    fn starved_windows_are_not_counted() {
        let start = Instant::now();
        let policy = StealPolicy::new(1, start);
        let mut now = start;
        // Lanes waiting for input all along: nothing is measured, so the
        // policy keeps measuring the first mode it has no rate for.
        for _ in 0..100 {
            now += Duration::from_millis(10);
            policy.lane_batch(10, Duration::from_millis(10), true, now);
        }
        let st = policy.lock();
        assert!(st.rate_alone.is_none() && st.rate_steal.is_none(), "{st:?}");
    }

    #[test]
    fn no_sample_is_taken_that_the_lanes_would_finish_sooner() {
        let start = Instant::now();
        let policy = StealPolicy::new(2, start);
        // The first window keeps the threads out.
        assert!(!policy.may_steal(1000, 8, start), "the lanes run alone first");
        // Lanes: 1 ms a sample each, 2 lanes: the 100th waiting sample is
        // reached in ~50 ms.
        policy.lane_batch(10, Duration::from_millis(10), false, start);
        // The second window steals. Unmeasured, a thread is taken to need
        // 20 ms a sample.
        let mut now = start + WINDOW;
        assert!(policy.stealing(now));
        assert!(policy.may_steal(100, 8, now));
        assert!(!policy.may_steal(40, 8, now), "25 ms > 19.5 ms");
        // Measured: 30 ms a sample.
        policy.stolen(Duration::from_millis(30), now);
        now += Duration::from_millis(1);
        assert!(policy.may_steal(100, 8, now), "30 ms x 1.25 < 49.5 ms");
        assert!(!policy.may_steal(60, 8, now), "the lanes reach the 60th in 29.5 ms");
        assert!(!policy.may_steal(8, 8, now), "the lanes' own backlog is never taken");
    }
}
