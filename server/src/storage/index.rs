//! The dataset index: `stoker-index.json` at a dataset's root names its
//! shards with their sample counts, so that a client can plan by sample
//! without opening a shard.

use serde::{Deserialize, Serialize};
use stoker_core::{DatasetUri, ShardRef};

use super::{Storage, StorageError};

/// Name of the optional index file at a dataset's root.
pub const INDEX_FILE: &str = "stoker-index.json";

/// The dataset index: shard names with their sample counts.
#[derive(Debug, Serialize, Deserialize)]
pub struct Index {
    pub version: u32,
    pub shards: Vec<IndexEntry>,
    /// Class names by label, when the packer knew them.
    #[serde(default)]
    pub classes: Vec<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct IndexEntry {
    pub name: String,
    pub samples: u64,
    pub size_bytes: u64,
}

impl Index {
    /// The indexed shards as the plan takes them, in the index's order.
    pub(crate) fn into_shard_refs(self) -> Vec<ShardRef> {
        self.shards
            .into_iter()
            .map(|e| ShardRef {
                name: e.name,
                size_bytes: e.size_bytes,
                samples: Some(e.samples),
            })
            .collect()
    }
}

impl Storage {
    /// The dataset's index, or `None` when it has none.
    pub(crate) async fn read_index(&self, uri: &DatasetUri) -> Result<Option<Index>, StorageError> {
        let object = uri.join(INDEX_FILE);
        let Some(bytes) = self.read_if_exists(uri, INDEX_FILE).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StorageError::BadIndex {
                object,
                reason: e.to_string(),
            })
    }
}
