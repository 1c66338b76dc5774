//! Shards for the pipeline's tests, written by hand in the layouts
//! `stoker pack` writes: WebDataset tars with `stoker-formats`' framing
//! (`append_member`), Parquet files through the parquet crate's
//! `ArrowWriter`.
//!
//! Not through `stoker-pack` itself: that tool sits above the worker (its
//! `convert` reads through this pipeline), so the worker may not depend on
//! it, and a reader checked against bytes its own writer made would share
//! that writer's mistakes.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, BinaryArray, Int64Array, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Fields, Schema};
use parquet::arrow::ArrowWriter;
use stoker_core::DatasetUri;
use stoker_formats::tar::append_member;

/// The name `stoker pack` gives a dataset's first WebDataset shard.
pub(super) const FIRST_TAR: &str = "shard-000000.tar";

/// A tar of `members` (name, bytes), in order, with its end-of-archive.
pub(super) fn tar(members: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, data) in members {
        append_member(&mut out, name, data);
    }
    out.extend_from_slice(&[0u8; 1024]);
    out
}

/// One class `a` of JPEG files (`stem`, bytes) as `stoker pack` writes an
/// ImageFolder into one WebDataset shard: sorted by file name, each
/// sample `a/<stem>` with members `a/<stem>.jpg` and `a/<stem>.cls` (`0`).
/// Returns the dataset, the folder `dir/shards`.
pub(super) fn image_folder_shard(dir: &Path, mut images: Vec<(String, Vec<u8>)>) -> DatasetUri {
    images.sort_by_key(|(stem, _)| format!("{stem}.jpg"));
    let names: Vec<(String, String)> = images
        .iter()
        .map(|(stem, _)| (format!("a/{stem}.jpg"), format!("a/{stem}.cls")))
        .collect();
    let mut members: Vec<(&str, &[u8])> = Vec::new();
    for ((image, cls), (_, data)) in names.iter().zip(&images) {
        members.push((image, data));
        members.push((cls, b"0"));
    }
    tar_dataset(dir, &members)
}

/// A dataset, the folder `dir/shards`, of one shard [`FIRST_TAR`] of
/// `members`.
pub(super) fn tar_dataset(dir: &Path, members: &[(&str, &[u8])]) -> DatasetUri {
    let shards = dir.join("shards");
    std::fs::create_dir_all(&shards).unwrap();
    std::fs::write(shards.join(FIRST_TAR), tar(members)).unwrap();
    DatasetUri::Local(shards)
}

/// `images` as a Parquet shard at `path` in Hugging Face's layout (an
/// `image` struct of `bytes` and `path`, an int64 `label`), in row groups
/// of `rows_per_group` rows, as `stoker pack` cuts them.
pub(super) fn parquet_shard(path: &Path, images: &[(String, Vec<u8>)], rows_per_group: usize) {
    let image_fields = Fields::from(vec![
        Field::new("bytes", DataType::Binary, true),
        Field::new("path", DataType::Utf8, true),
    ]);
    let schema = Arc::new(Schema::new(vec![
        Field::new("image", DataType::Struct(image_fields.clone()), true),
        Field::new("label", DataType::Int64, true),
    ]));
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, Arc::clone(&schema), None).unwrap();
    for group in images.chunks(rows_per_group) {
        let paths = StringArray::from_iter_values(group.iter().map(|(k, _)| k.as_str()));
        let bytes = BinaryArray::from_iter_values(group.iter().map(|(_, d)| d.as_slice()));
        let labels = Int64Array::from_iter_values(group.iter().map(|_| 0));
        let image = StructArray::new(
            image_fields.clone(),
            vec![Arc::new(bytes) as ArrayRef, Arc::new(paths)],
            None,
        );
        let batch =
            RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(image) as ArrayRef, Arc::new(labels)]).unwrap();
        writer.write(&batch).unwrap();
        // Each flush ends a row group.
        writer.flush().unwrap();
    }
    writer.close().unwrap();
}
