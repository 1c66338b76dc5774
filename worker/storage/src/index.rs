//! The dataset index: `stoker-index.json` at a dataset's root names its
//! shards with their sample counts, so that a client can plan by sample
//! without opening a shard. `stoker pack`'s [`PackReport`] (what it left
//! out or flagged) is stored in it, beside the shards.

use std::collections::BTreeMap;

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
    /// What `stoker pack` left out of its input, or packed knowing workers
    /// will skip it; workers tell their clients, and `stoker doctor` says it.
    #[serde(default, skip_serializing_if = "PackReport::is_empty")]
    pub pack_report: PackReport,
}

/// What `stoker pack` did not pack as a good image, by reason, with the
/// first files of each kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackReport {
    /// Files of the input not packed: not images by name or contents, empty.
    #[serde(default, skip_serializing_if = "Problems::is_empty")]
    pub left_out: Problems,
    /// Images packed that every worker will skip (truncated, no readable
    /// header): packed so the dataset keeps every file of its input, and
    /// reported so that nobody learns of them first in training.
    #[serde(default, skip_serializing_if = "Problems::is_empty")]
    pub flagged: Problems,
}

/// Files with a problem: how many, by reason, and the first few.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problems {
    pub count: u64,
    pub by_reason: BTreeMap<String, u64>,
    /// The first [`Problems::FIRST`], as `PATH: REASON`.
    pub first: Vec<String>,
}

impl Problems {
    /// Files named in [`Problems::first`].
    pub const FIRST: usize = 10;
    /// Distinct reasons counted apart; the rest count as "other".
    const REASONS: usize = 16;

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Counts `what` (a path or key) under `reason`.
    pub fn add(&mut self, what: &str, reason: &str) {
        self.count += 1;
        let key = if self.by_reason.contains_key(reason) || self.by_reason.len() < Self::REASONS {
            reason
        } else {
            "other"
        };
        *self.by_reason.entry(key.to_owned()).or_default() += 1;
        if self.first.len() < Self::FIRST {
            self.first.push(format!("{what}: {reason}"));
        }
    }

    pub fn merge(&mut self, other: Problems) {
        self.count += other.count;
        for (reason, n) in other.by_reason {
            *self.by_reason.entry(reason).or_default() += n;
        }
        let room = Self::FIRST.saturating_sub(self.first.len());
        self.first.extend(other.first.into_iter().take(room));
    }

    /// "2 empty file, 1 truncated jpeg": the counts by reason.
    pub fn reasons(&self) -> String {
        self.by_reason
            .iter()
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl PackReport {
    pub fn is_empty(&self) -> bool {
        self.left_out.is_empty() && self.flagged.is_empty()
    }

    pub fn merge(&mut self, other: PackReport) {
        self.left_out.merge(other.left_out);
        self.flagged.merge(other.flagged);
    }

    /// One line per kind of problem, for a log or a terminal; none when
    /// there is none.
    pub fn lines(&self) -> Vec<String> {
        [
            (&self.left_out, "left out", "file(s) of the input"),
            (&self.flagged, "packed", "image(s) that workers will skip"),
        ]
        .into_iter()
        .filter(|(problems, ..)| !problems.is_empty())
        .map(|(problems, did, what)| {
            format!(
                "stoker pack {did} {} {what}: {} (first: {})",
                problems.count,
                problems.reasons(),
                problems.first.join("; ")
            )
        })
        .collect()
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub struct IndexEntry {
    pub name: String,
    pub samples: u64,
    pub size_bytes: u64,
}

impl Index {
    /// The indexed shards as the plan takes them, in the index's order.
    pub fn into_shard_refs(self) -> Vec<ShardRef> {
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
    pub async fn read_index(&self, uri: &DatasetUri) -> Result<Option<Index>, StorageError> {
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
