//! `stoker.transforms` (Python): torchvision pipelines converted and run
//! through real workers; MixUp / CutMix on the batch.
