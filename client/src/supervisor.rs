//! The supervisor of one epoch: the task between the lanes and the
//! consumer. It takes the lanes' events through the [`Sequencer`] into the
//! [`Assembler`], uploads each batch when the loader does, and queues it
//! for the consumer; when the lanes are done it reports the epoch's error,
//! or yields the batches that close the epoch.

use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::assemble::{Assembler, LastBatch};
use crate::batch::{Batch, upload};
use crate::config::LoaderConfig;
use crate::device::{DeviceBatch, Uploader};
use crate::dispatch::EpochLanes;
use crate::error::ClientError;
use crate::event::Event;
use crate::ledger::Ledger;
use crate::order::{Ordered, Sequencer};
use crate::report::EpochCounters;

/// Why the supervisor stops before the lanes are done.
enum Abort {
    /// The consumer dropped the epoch.
    Dropped,
    /// Assembling or uploading a batch failed.
    Failed(ClientError),
}

/// Everything the supervisor of epoch `epoch` owns.
pub(crate) struct Supervisor {
    pub epoch: u64,
    pub config: Arc<LoaderConfig>,
    pub ledger: Arc<Ledger>,
    pub counters: Arc<EpochCounters>,
    /// The lanes' tasks (the events channel closes when the last ends).
    pub lanes: Arc<EpochLanes>,
    pub events: mpsc::Receiver<Event>,
    /// The consumer's queue (bounded: the prefetch).
    pub batches: mpsc::Sender<Result<Batch, ClientError>>,
    pub sequencer: Sequencer,
    pub assembler: Assembler<DeviceBatch>,
    pub uploader: Option<Arc<Uploader>>,
}

impl Supervisor {
    /// Runs the epoch to its end, or until the consumer leaves or a batch
    /// fails.
    pub async fn run(mut self) {
        if let Err(abort) = self.pass_events().await {
            self.abort(abort).await;
            return;
        }
        if let Some(err) = self.epoch_error() {
            let _ = self.batches.send(Err(err)).await;
            return;
        }
        if self.assembler.dropped > 0 && self.config.last_batch != LastBatch::Drop {
            warn!(
                epoch = self.epoch,
                dropped = self.assembler.dropped,
                "more samples arrived than the dataset's index counts; the surplus was left out"
            );
        }
        self.finish().await;
    }

    /// Takes events until every lane has ended (all senders gone).
    async fn pass_events(&mut self) -> Result<(), Abort> {
        let mut ordered = Vec::new();
        loop {
            let event = tokio::select! {
                event = self.events.recv() => event,
                // The consumer dropped the epoch: stop the lanes now,
                // not when the next batch finds nobody to take it.
                () = self.batches.closed() => return Err(Abort::Dropped),
            };
            let Some(event) = event else {
                return Ok(());
            };
            self.sequencer.push(event, &mut ordered);
            if self.config.deterministic {
                self.ledger.advance(self.sequencer.head());
            }
            for o in ordered.drain(..) {
                self.pass(o).await?;
            }
        }
    }

    /// Hands one sample or completion to the assembler, and a batch it
    /// fills to the consumer.
    async fn pass(&mut self, o: Ordered) -> Result<(), Abort> {
        let batch = match o {
            Ordered::Sample(s) => self.assembler.push(s).await,
            Ordered::ItemComplete(item) => {
                self.assembler.complete(item);
                Ok(None)
            }
        };
        let batch = batch
            .and_then(|b| b.map(|b| upload(self.uploader.as_deref(), b)).transpose())
            .map_err(Abort::Failed)?;
        if let Some(batch) = batch
            && self.batches.send(Ok(batch)).await.is_err()
        {
            // The consumer left: stop the lanes.
            return Err(Abort::Dropped);
        }
        Ok(())
    }

    /// Ends the epoch early: the ledger's failure stops the lanes from
    /// taking items, the consumer gets the error if it is still there, and
    /// the lanes are stopped.
    async fn abort(&mut self, abort: Abort) {
        match abort {
            Abort::Dropped => self.ledger.fail(ClientError::EpochDropped { epoch: self.epoch }),
            Abort::Failed(err) => {
                self.ledger.fail(err.clone());
                let _ = self.batches.send(Err(err)).await;
            }
        }
        self.lanes.abort();
    }

    /// Once the lanes are done: what ends the epoch in error, if anything.
    fn epoch_error(&self) -> Option<ClientError> {
        if let Some(err) = self.ledger.fatal() {
            return Some(err);
        }
        if let Some(err) = self.counters.over_budget(self.config.max_errors, true) {
            return Some(err);
        }
        if let Some(err) = self.counters.nothing_delivered() {
            return Some(err);
        }
        let left = self.ledger.remaining();
        (left > 0).then_some(ClientError::ItemsIncomplete {
            epoch: self.epoch,
            items: left,
        })
    }

    /// Yields the batches that close the epoch (see
    /// [`Assembler::finish_next`]), one at a time.
    async fn finish(mut self) {
        loop {
            let batch = match self.assembler.finish_next().await {
                Ok(Some(b)) => b,
                Ok(None) => return,
                Err(err) => {
                    let _ = self.batches.send(Err(err)).await;
                    return;
                }
            };
            if batch.padded > 0 {
                debug!(
                    epoch = self.epoch,
                    index = batch.index,
                    padded = batch.padded,
                    "batch padded"
                );
            }
            let batch = match upload(self.uploader.as_deref(), batch) {
                Ok(b) => b,
                Err(err) => {
                    let _ = self.batches.send(Err(err)).await;
                    return;
                }
            };
            if self.batches.send(Ok(batch)).await.is_err() {
                return;
            }
        }
    }
}
