//! Batch assembly: samples are copied once, from the network buffer into
//! the batch's contiguous NHWC buffer.

use crate::wire::Sample;

/// One batch: `len()` images of `size` x `size` x 3, uint8, NHWC.
#[derive(Debug, Clone)]
pub struct Batch {
    pub epoch: u64,
    /// Position of this batch in the epoch, from 0.
    pub index: u64,
    /// Side of each (square) image.
    pub size: u32,
    /// `len() * size * size * 3` bytes.
    pub pixels: Vec<u8>,
    pub labels: Vec<i64>,
    pub keys: Vec<String>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The pixels of image `i` (HWC).
    pub fn image(&self, i: usize) -> &[u8] {
        let n = self.size as usize * self.size as usize * 3;
        &self.pixels[i * n..(i + 1) * n]
    }
}

/// Fills batches of `batch_size` samples.
#[derive(Debug)]
pub(crate) struct Assembler {
    epoch: u64,
    size: u32,
    batch_size: usize,
    next_index: u64,
    current: Option<Batch>,
}

impl Assembler {
    pub fn new(epoch: u64, size: u32, batch_size: usize) -> Self {
        Self {
            epoch,
            size,
            batch_size,
            next_index: 0,
            current: None,
        }
    }

    fn fresh(&mut self) -> Batch {
        let image = self.size as usize * self.size as usize * 3;
        Batch {
            epoch: self.epoch,
            index: self.next_index,
            size: self.size,
            pixels: Vec::with_capacity(self.batch_size * image),
            labels: Vec::with_capacity(self.batch_size),
            keys: Vec::with_capacity(self.batch_size),
        }
    }

    /// Adds a sample; returns a batch when one is full.
    pub fn push(&mut self, sample: Sample) -> Option<Batch> {
        let batch = match self.current.take() {
            Some(b) => b,
            None => self.fresh(),
        };
        let mut batch = batch;
        batch.pixels.extend_from_slice(&sample.pixels);
        batch.labels.push(sample.label);
        batch.keys.push(sample.key);
        if batch.len() == self.batch_size {
            self.next_index += 1;
            Some(batch)
        } else {
            self.current = Some(batch);
            None
        }
    }

    /// The last, partial batch, unless `drop_last`.
    pub fn finish(&mut self, drop_last: bool) -> Option<Batch> {
        let b = self.current.take()?;
        if drop_last || b.is_empty() {
            return None;
        }
        self.next_index += 1;
        Some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn sample(i: u8) -> Sample {
        Sample {
            key: format!("k{i}"),
            label: i64::from(i),
            pixels: Bytes::from(vec![i; 2 * 2 * 3]),
        }
    }

    #[test]
    fn fills_batches_in_order_and_keeps_the_tail() {
        let mut a = Assembler::new(3, 2, 2);
        assert!(a.push(sample(0)).is_none());
        let b = a.push(sample(1)).unwrap();
        assert_eq!((b.epoch, b.index, b.len()), (3, 0, 2));
        assert_eq!(b.image(1), &[1u8; 12]);
        assert_eq!(b.keys, ["k0", "k1"]);
        assert!(a.push(sample(2)).is_none());
        let tail = a.finish(false).unwrap();
        assert_eq!((tail.index, tail.len()), (1, 1));
        assert!(a.finish(false).is_none());
    }

    #[test]
    fn drop_last_discards_the_tail() {
        let mut a = Assembler::new(0, 2, 4);
        a.push(sample(0));
        assert!(a.finish(true).is_none());
    }
}
