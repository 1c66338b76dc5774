//! The workers a loader knows: a connection set per worker, its credit,
//! whether it is among the addresses now, and the epochs to tell when
//! that changes. Workers from `dns://` entries come and go as the
//! discovery task ([`rediscover`]) re-resolves their names; a worker is
//! never forgotten, only retired, so that its number stays the same in
//! every epoch's ledger and counters.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tracing::{info, warn};

use crate::config::LoaderConfig;
use crate::conn::WorkerConn;
use crate::discovery::{Discovery, Lookup, WorkerSource};
use crate::dispatch::EpochLanes;
use crate::error::ClientError;
use crate::ring::SharedRing;

/// The workers of a loader, and its epochs in progress.
#[derive(Default)]
pub(crate) struct WorkerSet {
    state: Mutex<SetState>,
}

#[derive(Default)]
struct SetState {
    workers: Vec<WorkerConn>,
    epochs: Vec<Weak<EpochLanes>>,
}

impl WorkerSet {
    pub fn new(workers: Vec<WorkerConn>) -> Self {
        Self {
            state: Mutex::new(SetState {
                workers,
                epochs: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, SetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts an epoch on the workers as they are now: `start` makes its
    /// lanes, and the epoch hears of every change from then on (nothing
    /// can change in between).
    pub fn start_epoch(&self, start: impl FnOnce(&[WorkerConn]) -> Arc<EpochLanes>) -> Arc<EpochLanes> {
        let mut st = self.lock();
        let lanes = start(&st.workers);
        st.epochs.retain(|e| e.strong_count() > 0);
        st.epochs.push(Arc::downgrade(&lanes));
        lanes
    }

    /// The workers among the addresses now.
    pub fn active(&self) -> Vec<WorkerConn> {
        self.lock().workers.iter().filter(|w| w.active).cloned().collect()
    }

    /// Addresses known so far, active or not.
    pub fn known(&self) -> BTreeSet<String> {
        self.lock().workers.iter().map(|w| w.addr.clone()).collect()
    }

    /// Takes a resolution of `source`: its workers not in `addrs` are
    /// retired, those back in it restored, and `new` (connections to its
    /// addresses not known before) join, in the running epochs too.
    pub fn apply(&self, source: &str, addrs: &BTreeSet<String>, new: Vec<WorkerConn>) {
        let mut st = self.lock();
        let epochs: Vec<Arc<EpochLanes>> = st.epochs.iter().filter_map(Weak::upgrade).collect();
        for (i, w) in st.workers.iter_mut().enumerate() {
            if w.source.as_deref() != Some(source) {
                continue;
            }
            let listed = addrs.contains(&w.addr);
            if w.active && !listed {
                info!(worker = %w.addr, %source, "worker left its dns name: draining it");
                let why = format!("no longer an address of {source}");
                for e in &epochs {
                    e.ledger.retire(i, &why);
                }
            } else if !w.active && listed {
                info!(worker = %w.addr, %source, "worker back in its dns name");
                for e in &epochs {
                    e.ledger.restore(i);
                }
            }
            w.active = listed;
        }
        for conn in new {
            if st.workers.iter().any(|w| w.addr == conn.addr) {
                continue;
            }
            info!(worker = %conn.addr, %source, "worker found by dns");
            for e in &epochs {
                e.join(&conn);
            }
            st.workers.push(conn);
        }
    }
}

/// Resolves every `dns://` entry of `sources` once: the workers to start
/// with. A name with no address, or one the resolver cannot look up, is an
/// error naming it.
pub(crate) async fn resolve_at_start(
    sources: &[WorkerSource],
    discovery: Option<&Discovery>,
) -> Result<Vec<(String, Option<String>)>, ClientError> {
    let mut out = Vec::new();
    for source in sources {
        match source {
            WorkerSource::Static(addr) => out.push((addr.clone(), None)),
            WorkerSource::Dns { name, port } => {
                let discovery = discovery.ok_or_else(|| ClientError::Config("no dns resolver".into()))?;
                match discovery.lookup(name, *port).await {
                    Lookup::Found(addrs) if addrs.is_empty() => {
                        return Err(ClientError::Config(format!("{source} resolves to no address")));
                    }
                    Lookup::Found(addrs) => {
                        info!(%source, workers = addrs.len(), "workers found by dns");
                        out.extend(addrs.into_iter().map(|a| (a, Some(source.to_string()))));
                    }
                    Lookup::Failed(e) => return Err(ClientError::Config(format!("cannot resolve {source}: {e}"))),
                }
            }
        }
    }
    Ok(out)
}

/// Re-resolves the `dns://` entries of `sources` every resolve interval
/// until the loader (`set`) is gone: new addresses get work, addresses
/// that disappear are drained. A lookup that fails keeps the last answer.
pub(crate) async fn rediscover(
    set: Weak<WorkerSet>,
    sources: Vec<WorkerSource>,
    discovery: Discovery,
    config: Arc<LoaderConfig>,
    ring: Option<Arc<SharedRing>>,
) {
    let mut ticks = tokio::time::interval(config.resolve_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is now: the loader has just resolved.
    ticks.tick().await;
    loop {
        ticks.tick().await;
        for source in &sources {
            let WorkerSource::Dns { name, port } = source else {
                continue;
            };
            let addrs = match discovery.lookup(name, *port).await {
                Lookup::Found(addrs) => addrs,
                Lookup::Failed(e) => {
                    warn!(%source, error = %e, "dns lookup failed; keeping the workers found before");
                    continue;
                }
            };
            let Some(workers) = set.upgrade() else {
                return;
            };
            let known = workers.known();
            let mut new = Vec::new();
            for addr in addrs.iter().filter(|a| !known.contains(*a)) {
                match WorkerConn::open(addr, &config, Some(source.to_string()), ring.as_ref()) {
                    Ok(mut conn) => {
                        conn.ask_info(&config).await;
                        new.push(conn);
                    }
                    Err(e) => warn!(%source, worker = %addr, error = %e, "cannot use a worker found by dns"),
                }
            }
            workers.apply(&source.to_string(), &addrs, new);
        }
        if set.strong_count() == 0 {
            return;
        }
    }
}
