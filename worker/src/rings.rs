//! The shared-memory rings of clients on this host (`stoker-shm`): each is
//! mapped while at least one of its client's items streams, and unmapped
//! when the last ends, so a client that died leaves nothing mapped once
//! its items are over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use stoker_shm::Attached;

/// A client's ring: the path it names and its nonce.
type RingKey = (String, Vec<u8>);

/// The rings mapped now.
#[derive(Debug, Default)]
pub(crate) struct Rings {
    mapped: Mutex<HashMap<RingKey, Weak<Attached>>>,
}

impl Rings {
    /// The ring at `path` with `nonce`, mapped now or already, for the
    /// item with `tag`; or why it cannot be used.
    pub(crate) fn attach(&self, path: &str, nonce: &[u8], tag: u32) -> Result<RingWriter, String> {
        if tag == 0 {
            return Err("the work item's ring tag is 0".to_owned());
        }
        #[cfg(feature = "failpoints")]
        fail::fail_point!(crate::failpoint::RING_REFUSED, |_| Err(format!(
            "failpoint {}: ring {path} refused",
            crate::failpoint::RING_REFUSED
        )));
        let mut mapped = self.mapped.lock().unwrap_or_else(|p| p.into_inner());
        mapped.retain(|_, ring| ring.strong_count() > 0);
        let key = (path.to_owned(), nonce.to_vec());
        let ring = match mapped.get(&key).and_then(Weak::upgrade) {
            Some(ring) => ring,
            None => {
                let ring = Arc::new(Attached::open(path, nonce).map_err(|e| e.to_string())?);
                mapped.insert(key, Arc::downgrade(&ring));
                ring
            }
        };
        Ok(RingWriter { ring, tag })
    }
}

/// One item's use of a client's ring.
#[derive(Debug)]
pub(crate) struct RingWriter {
    ring: Arc<Attached>,
    tag: u32,
}

impl RingWriter {
    /// Writes `pixels` into a free slot and returns its number, or `None`
    /// when none is free or they do not fit: the caller sends them inline.
    pub(crate) fn write(&self, pixels: &Bytes) -> Option<u32> {
        self.ring.write(self.tag, pixels)
    }
}
