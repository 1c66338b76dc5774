//! The shared-memory path from workers on this host (`stoker-shm`).
//!
//! The loader owns one ring ([`SharedRing`]) whose slots hold one output
//! image each (of the transform's size, or up to a share of the ring when
//! the transform keeps each image's own). Each worker gets a
//! [`RingRoute`]: once its `Info` says it runs on this host (same kernel
//! boot and PID namespace), every work item
//! offers it the ring, and it writes pixels there instead of into the
//! response. The route is logged once per worker, and falls back to the
//! network for good when the worker says it cannot use the ring.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use stoker_shm::{Ring, StreamTag};
use tracing::{debug, info, warn};

use crate::config::LoaderConfig;

/// Slots of the ring for a transform that keeps each image's size: 4 MiB
/// each of the default 256 MiB, an image of 1.4 megapixels (1333x1000).
const EACH_SIZE_SLOTS: usize = 64;

/// The loader's ring, and this host's identity to compare workers' with.
#[derive(Debug)]
pub(crate) struct SharedRing {
    ring: Ring,
    host: String,
}

impl SharedRing {
    /// The ring `config` asks for (`shared_memory` bytes of slots of the
    /// output image's size), or `None` when it asks for none or this
    /// host cannot make one (then every worker is reached over the network).
    pub fn for_config(config: &LoaderConfig) -> Option<Arc<Self>> {
        if config.shared_memory == 0 {
            return None;
        }
        let host = stoker_shm::host_identity();
        if host.is_empty() {
            warn!(
                "cannot read this host's boot id or pid namespace: workers on this host are reached over the network"
            );
            return None;
        }
        // A slot holds one image: the transform's, or, for a transform
        // that keeps each image's size, a share of the ring (an image
        // larger than a slot comes over the network, as one that finds
        // every slot taken does).
        let slot_bytes = config
            .transform
            .image_bytes()
            .unwrap_or(config.shared_memory / EACH_SIZE_SLOTS);
        let slots = (config.shared_memory / slot_bytes.max(1)).clamp(1, stoker_shm::layout::MAX_SLOTS as usize);
        match Ring::create(slots as u32, slot_bytes) {
            Ok(ring) => Some(Arc::new(Self { ring, host })),
            Err(e) => {
                warn!(error = %e, "cannot make the shared-memory ring: workers on this host are reached over the network");
                None
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// Not known yet (no `Info` answer).
    Unknown,
    Ring,
    Network,
}

/// Whether one worker is offered the ring.
#[derive(Debug)]
pub(crate) struct RingRoute {
    addr: String,
    shared: Option<Arc<SharedRing>>,
    route: Mutex<Route>,
}

/// One work item's offer: what its request carries, and the tag its
/// slots are taken with (freed when the item's stream ends).
#[derive(Debug)]
pub(crate) struct RingOffer {
    pub path: String,
    pub nonce: [u8; 16],
    pub tag: StreamTag,
}

impl RingOffer {
    /// The sample's pixels from `slot`, `len` bytes, read in place: the
    /// slot is free again when the returned bytes are dropped.
    pub fn take(&self, slot: u32, len: usize) -> Result<Bytes, String> {
        self.tag
            .take(slot, len)
            .map(Bytes::from_owner)
            .map_err(|e| e.to_string())
    }
}

impl RingRoute {
    pub fn new(addr: &str, shared: Option<Arc<SharedRing>>) -> Arc<Self> {
        let route = if shared.is_some() {
            Route::Unknown
        } else {
            Route::Network
        };
        Arc::new(Self {
            addr: addr.to_owned(),
            shared,
            route: Mutex::new(route),
        })
    }

    fn set(&self, to: Route, why: &str) {
        let mut route = self.route.lock().unwrap_or_else(|p| p.into_inner());
        if *route == to || *route == Route::Network {
            return;
        }
        *route = to;
        match to {
            Route::Ring => info!(worker = %self.addr, "worker on this host: samples through shared memory"),
            Route::Network if why.is_empty() => {
                debug!(worker = %self.addr, "worker on another host or pid namespace: samples over the network");
            }
            Route::Network => info!(worker = %self.addr, reason = %why, "samples over the network"),
            Route::Unknown => {}
        }
    }

    /// Decides from the worker's `Info.host` (empty from older workers).
    pub fn decide(&self, worker_host: &str) {
        let Some(shared) = &self.shared else {
            return;
        };
        if worker_host.is_empty() {
            self.set(Route::Network, "the worker does not say its host (an older worker)");
        } else if worker_host != shared.host {
            self.set(Route::Network, "");
        } else {
            self.set(Route::Ring, "");
        }
    }

    /// The worker could not use the ring (`reason`, from its answer).
    pub fn refused(&self, reason: &str) {
        let mut route = self.route.lock().unwrap_or_else(|p| p.into_inner());
        if *route != Route::Network {
            *route = Route::Network;
            warn!(worker = %self.addr, reason = %reason, "worker on this host cannot use the shared-memory ring: samples over the network");
        }
    }

    /// The offer for one work item, while the worker takes the ring.
    pub fn offer(&self) -> Option<RingOffer> {
        let route = *self.route.lock().unwrap_or_else(|p| p.into_inner());
        let shared = self.shared.as_ref().filter(|_| route == Route::Ring)?;
        Some(RingOffer {
            path: shared.ring.path().to_owned(),
            nonce: shared.ring.nonce(),
            tag: shared.ring.stream(),
        })
    }
}

#[cfg(test)]
mod tests {
    use stoker_core::TransformSpec;

    use super::*;

    fn shared() -> Arc<SharedRing> {
        let config = LoaderConfig::new(vec!["w:1".into()], "d", 4, TransformSpec::train(8));
        SharedRing::for_config(&config).expect("this host makes a ring")
    }

    #[test]
    fn a_worker_on_this_host_gets_the_ring_and_others_the_network() {
        let shared = shared();
        let here = RingRoute::new("here:1", Some(Arc::clone(&shared)));
        assert!(here.offer().is_none(), "nothing offered before the worker's info");
        here.decide(&stoker_shm::host_identity());
        let offer = here.offer().expect("same host, same pid namespace");
        assert_eq!(offer.path, shared.ring.path());
        assert_eq!(offer.nonce, shared.ring.nonce());
        assert_ne!(offer.tag.tag(), here.offer().unwrap().tag.tag(), "one tag per item");

        let elsewhere = RingRoute::new("there:1", Some(Arc::clone(&shared)));
        elsewhere.decide("another-boot/pid:[1]");
        assert!(elsewhere.offer().is_none());
        let old = RingRoute::new("old:1", Some(Arc::clone(&shared)));
        old.decide("");
        assert!(old.offer().is_none(), "a worker that does not say its host");
        let off = RingRoute::new("off:1", None);
        off.decide(&stoker_shm::host_identity());
        assert!(off.offer().is_none(), "no ring configured");
    }

    #[test]
    fn a_refusal_sends_the_worker_to_the_network_for_good() {
        let route = RingRoute::new("here:1", Some(shared()));
        route.decide(&stoker_shm::host_identity());
        assert!(route.offer().is_some());
        route.refused("cannot open");
        assert!(route.offer().is_none());
        route.decide(&stoker_shm::host_identity());
        assert!(route.offer().is_none(), "a later info does not undo the refusal");
    }

    #[test]
    fn the_ring_holds_the_configured_bytes_of_output_images() {
        let mut config = LoaderConfig::new(vec!["w:1".into()], "d", 4, TransformSpec::train(100));
        config.shared_memory = 3_000_000;
        let ring = SharedRing::for_config(&config).unwrap();
        assert_eq!(ring.ring.layout().slots, 100);
        assert!(ring.ring.layout().slot_bytes >= 30_000);
        config.shared_memory = 0;
        assert!(SharedRing::for_config(&config).is_none());
    }
}
