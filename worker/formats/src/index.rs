//! Record index files: where each record of a shard starts, so that a
//! sample range is read from its first byte instead of the shard's.
//!
//! - RecordIO's `.idx` (MXNet's `MXIndexedRecordIO`, `im2rec`): a line
//!   `<key>\t<offset>` per record, in any order.
//! - TFRecord's `.idx` (DALI's `tfrecord2idx`): a line `<offset> <size>`
//!   per record, in file order.
//!
//! Either way the result is the records' offsets in file order, the
//! position of a sample being its rank there. [`byte_range`] gives the
//! bytes of a sample range.

/// Why an index file could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IndexError {
    #[error("line {line}: {reason}")]
    Line { line: usize, reason: String },
    #[error("two records at byte {offset}")]
    Duplicate { offset: u64 },
    #[error("sample {start} is past the index's {records} records")]
    PastEnd { start: u64, records: usize },
}

/// The offsets of a RecordIO `.idx`, sorted.
pub fn recordio_offsets(text: &[u8]) -> Result<Vec<u64>, IndexError> {
    offsets(text, 1, "<key> <offset>")
}

/// The offsets of a DALI TFRecord `.idx`, sorted.
pub fn tfrecord_offsets(text: &[u8]) -> Result<Vec<u64>, IndexError> {
    offsets(text, 0, "<offset> <size>")
}

/// Reads the `column` of each line of two fields, which `layout` names.
fn offsets(text: &[u8], column: usize, layout: &str) -> Result<Vec<u64>, IndexError> {
    let text = std::str::from_utf8(text).map_err(|e| IndexError::Line {
        line: text[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1,
        reason: "not UTF-8 text".to_owned(),
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let bad = |reason: String| IndexError::Line { line: i + 1, reason };
        if fields.len() != 2 {
            return Err(bad(format!("expected {layout}, found {} fields", fields.len())));
        }
        let offset = fields[column];
        out.push(
            offset
                .parse::<u64>()
                .map_err(|_| bad(format!("offset {offset:?} is not a number")))?,
        );
    }
    out.sort_unstable();
    if let Some(w) = out.windows(2).find(|w| w[0] == w[1]) {
        return Err(IndexError::Duplicate { offset: w[0] });
    }
    Ok(out)
}

/// The bytes of a shard that hold samples `start` up to `end` (or the
/// shard's end), given its records' `offsets`: from the first one's
/// offset to the offset of the one after the last (`None`: the end of the
/// shard).
pub fn byte_range(offsets: &[u64], start: u64, end: Option<u64>) -> Result<(u64, Option<u64>), IndexError> {
    let at = |i: u64| usize::try_from(i).ok().and_then(|i| offsets.get(i).copied());
    let first = at(start).ok_or(IndexError::PastEnd {
        start,
        records: offsets.len(),
    })?;
    Ok((first, end.and_then(at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recordio_index_is_sorted_by_offset() {
        let idx = b"2\t80\n0\t0\n1\t40\n";
        assert_eq!(recordio_offsets(idx), Ok(vec![0, 40, 80]));
        assert_eq!(byte_range(&[0, 40, 80], 1, Some(2)), Ok((40, Some(80))));
        assert_eq!(byte_range(&[0, 40, 80], 2, Some(3)), Ok((80, None)));
        assert_eq!(byte_range(&[0, 40, 80], 0, None), Ok((0, None)));
        assert_eq!(
            byte_range(&[0, 40], 2, None),
            Err(IndexError::PastEnd { start: 2, records: 2 })
        );
    }

    #[test]
    fn dali_tfrecord_index_reads_offset_and_size() {
        assert_eq!(tfrecord_offsets(b"0 120\n120 98\n\n218 7\n"), Ok(vec![0, 120, 218]));
    }

    #[test]
    fn bad_lines_are_named() {
        assert_eq!(
            recordio_offsets(b"0\t0\n1\tx\n"),
            Err(IndexError::Line {
                line: 2,
                reason: "offset \"x\" is not a number".to_owned()
            })
        );
        assert!(matches!(
            tfrecord_offsets(b"0\n"),
            Err(IndexError::Line { line: 1, .. })
        ));
        assert_eq!(
            recordio_offsets(b"0\t8\n1\t8\n"),
            Err(IndexError::Duplicate { offset: 8 })
        );
        assert!(matches!(
            recordio_offsets(b"0\t0\n\xff"),
            Err(IndexError::Line { line: 2, .. })
        ));
    }
}
