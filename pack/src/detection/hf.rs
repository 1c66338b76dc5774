//! Hugging Face Parquet detection datasets, as `cppe-5` and
//! `detection-datasets/coco` publish them: an `image` struct of `bytes`
//! and `path`, and an `objects` column of the instances, `Sequence({...})`
//! stored as a struct of lists (or `List({...})`, a list of structs):
//! `bbox` (four numbers), `category` (a `ClassLabel`: its names from the
//! schema's `huggingface` metadata), optionally `area`, `iscrowd` and
//! `id` or `bbox_id`. Boxes are in pixels, in the format the dataset's
//! card gives (`--box-format`): datasets do not say it in their schema.
//!
//! Read a file at a time, [`BATCH_ROWS`] rows at a time ([`Rows`]), so
//! memory holds a batch of rows, not the dataset.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type, Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use stoker_core::targets::BoxFormat;
use stoker_storage::PackReport;

use super::types::{Annotated, ImageSource, Instance, Listing, MAX_CLASS_ID, Problem, Scheme, key_of};
use crate::error::PackError;
use crate::error::io_err;

/// Rows read at a time.
pub(super) const BATCH_ROWS: usize = 64;

/// The dataset's Parquet files, read in order.
pub(crate) struct Rows {
    files: Vec<PathBuf>,
    next_file: usize,
    reader: Option<(PathBuf, ParquetRecordBatchReader)>,
    /// Rows read from the current file.
    row: usize,
    /// The `ClassLabel`'s names (0: none known, any id goes).
    classes: usize,
}

fn err(file: &Path, why: impl Into<String>) -> PackError {
    PackError::Annotations {
        file: file.to_owned(),
        why: why.into(),
    }
}

/// The Parquet files of `input` (a file, or a folder searched
/// recursively), sorted.
fn parquet_files(input: &Path) -> Result<Vec<PathBuf>, PackError> {
    if input.is_file() {
        return Ok(vec![input.to_owned()]);
    }
    if !input.is_dir() {
        return Err(PackError::NoInput(input.to_owned()));
    }
    let mut found = Vec::new();
    let mut dirs = vec![input.to_owned()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir).map_err(io_err(&dir))? {
            let path = e.map_err(io_err(&dir))?.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "parquet") {
                found.push(path);
            }
        }
    }
    found.sort();
    if found.is_empty() {
        return Err(err(input, "no .parquet files"));
    }
    Ok(found)
}

/// Opens the dataset `input`: its classes from the first file's
/// `huggingface` metadata, its columns checked.
pub(super) fn open(input: &Path, format: BoxFormat) -> Result<Listing<Rows>, PackError> {
    let files = parquet_files(input)?;
    let first = &files[0];
    let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(first).map_err(io_err(first))?)
        .map_err(|e| err(first, format!("not parquet: {e}")))?;
    let schema = Arc::clone(builder.schema());
    let columns: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    if !columns.contains(&"image") || !columns.contains(&"objects") {
        return Err(err(
            first,
            format!("no image and objects columns (columns: {})", columns.join(", ")),
        ));
    }
    let objects = schema
        .field_with_name("objects")
        .map_err(|e| err(first, e.to_string()))?;
    let fields = object_fields(objects.data_type());
    for need in ["bbox", "category"] {
        if !fields.iter().any(|f| f == need) {
            return Err(err(
                first,
                format!("objects has no {need} (it has: {})", fields.join(", ")),
            ));
        }
    }
    let classes = match schema.metadata().get("huggingface") {
        Some(meta) => class_names(meta).map_err(|why| err(first, why))?,
        None => Vec::new(),
    };
    Ok(Listing {
        scheme: Scheme {
            format,
            crowd: fields.iter().any(|f| f == "iscrowd"),
            area: fields.iter().any(|f| f == "area"),
            ..Scheme::default()
        },
        images: Rows {
            files,
            next_file: 0,
            reader: None,
            row: 0,
            classes: classes.len(),
        },
        classes,
        report: PackReport::default(),
    })
}

/// The names of the fields of `objects`: a struct of lists, or a list of
/// structs.
fn object_fields(t: &DataType) -> Vec<String> {
    let fields = match t {
        DataType::Struct(f) => f,
        DataType::List(item) | DataType::LargeList(item) => match item.data_type() {
            DataType::Struct(f) => f,
            _ => return Vec::new(),
        },
        _ => return Vec::new(),
    };
    fields.iter().map(|f| f.name().clone()).collect()
}

/// The category names in the schema's `huggingface` metadata: the
/// `ClassLabel` under `objects`.
fn class_names(meta: &str) -> Result<Vec<String>, String> {
    let doc: serde_json::Value = serde_json::from_str(meta).map_err(|e| format!("huggingface metadata: {e}"))?;
    fn find(v: &serde_json::Value) -> Option<&Vec<serde_json::Value>> {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("_type").and_then(|t| t.as_str()) == Some("ClassLabel") {
                    return m.get("names").and_then(|n| n.as_array());
                }
                m.values().find_map(find)
            }
            serde_json::Value::Array(a) => a.iter().find_map(find),
            _ => None,
        }
    }
    let objects = &doc["info"]["features"]["objects"];
    let Some(names) = find(objects) else {
        return Ok(Vec::new());
    };
    if names.len() as i64 > MAX_CLASS_ID {
        return Err(format!("{} class names, over {MAX_CLASS_ID}", names.len()));
    }
    Ok(names
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_owned())
        .collect())
}

impl Rows {
    /// The next rows' images and their instances; `None` at the end.
    pub(crate) fn next_batch(&mut self) -> Result<Option<Vec<Annotated>>, PackError> {
        loop {
            if self.reader.is_none() {
                let Some(path) = self.files.get(self.next_file).cloned() else {
                    return Ok(None);
                };
                self.next_file += 1;
                let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).map_err(io_err(&path))?)
                    .and_then(|b| b.with_batch_size(BATCH_ROWS).build())
                    .map_err(|e| err(&path, format!("not parquet: {e}")))?;
                self.reader = Some((path, reader));
                self.row = 0;
            }
            let Some((path, reader)) = &mut self.reader else {
                continue;
            };
            match reader.next() {
                Some(Ok(batch)) => {
                    let first = self.row;
                    self.row += batch.num_rows();
                    return rows_of(path, &batch, first, self.classes).map(Some);
                }
                Some(Err(e)) => return Err(err(path, format!("row {}: {e}", self.row))),
                None => self.reader = None,
            }
        }
    }
}

/// The images of `batch`, its first row numbered `first` in `file`.
fn rows_of(file: &Path, batch: &RecordBatch, first: usize, classes: usize) -> Result<Vec<Annotated>, PackError> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .cloned()
            .ok_or_else(|| err(file, format!("no {name} column")))
    };
    let image = column("image")?;
    let objects = column("objects")?;
    let image_ids = batch.column_by_name("image_id").cloned();
    let stem = file.file_stem().unwrap_or_default().to_string_lossy().into_owned();
    let mut out = Vec::with_capacity(batch.num_rows());
    for r in 0..batch.num_rows() {
        let row = first + r;
        let (bytes, path) = image_cell(&image, r);
        let image_id = image_ids.as_ref().and_then(|a| number(a.as_ref(), r)).map(|v| v as i64);
        let key = match (&path, image_id) {
            (Some(p), _) if !p.is_empty() => key_of(Path::new(p)),
            (_, Some(id)) => id.to_string(),
            _ => format!("{stem}-{row:06}"),
        };
        let shown = match &path {
            Some(p) if !p.is_empty() => format!("{}, row {row} ({p})", file.display()),
            _ => format!("{}, row {row}", file.display()),
        };
        let (instances, bad) = match instances(&objects, r, classes) {
            Ok(i) => (i, None),
            Err((what, why)) => (Vec::new(), Some(Problem::new(format!("{shown}, {what}"), why))),
        };
        let bad = bad.or_else(|| {
            bytes
                .is_none()
                .then(|| Problem::new(&shown, "no image bytes in the row"))
        });
        out.push(Annotated {
            key,
            shown,
            image: ImageSource::Held(bytes.unwrap_or_default()),
            declared: None,
            instances,
            bad,
            image_id: None,
        });
    }
    Ok(out)
}

/// An `image` cell's bytes and path (a struct), or bytes (binary).
fn image_cell(image: &ArrayRef, r: usize) -> (Option<bytes::Bytes>, Option<String>) {
    if image.is_null(r) {
        return (None, None);
    }
    let binary = |a: &dyn Array| -> Option<bytes::Bytes> {
        if a.is_null(r) {
            return None;
        }
        a.as_binary_opt::<i32>()
            .map(|b| bytes::Bytes::copy_from_slice(b.value(r)))
            .or_else(|| {
                a.as_binary_opt::<i64>()
                    .map(|b| bytes::Bytes::copy_from_slice(b.value(r)))
            })
    };
    match image.as_struct_opt() {
        Some(s) => {
            let bytes = s.column_by_name("bytes").and_then(|b| binary(b.as_ref()));
            let path = s.column_by_name("path").and_then(|p| {
                let p = p.as_string_opt::<i32>()?;
                (!p.is_null(r)).then(|| p.value(r).to_owned())
            });
            (bytes, path)
        }
        None => (binary(image.as_ref()), None),
    }
}

/// Row `r`'s objects, each field's values (one per object).
fn object_columns(objects: &ArrayRef, r: usize) -> Option<Vec<(String, ArrayRef)>> {
    if objects.is_null(r) {
        return None;
    }
    if let Some(s) = objects.as_struct_opt() {
        // A struct of lists: each field's list at row r.
        let mut out = Vec::new();
        for (f, col) in s.fields().iter().zip(s.columns()) {
            let values = match col.as_list_opt::<i32>() {
                Some(l) if !l.is_null(r) => l.value(r),
                Some(_) => continue,
                None => match col.as_list_opt::<i64>() {
                    Some(l) if !l.is_null(r) => l.value(r),
                    _ => continue,
                },
            };
            out.push((f.name().clone(), values));
        }
        return Some(out);
    }
    // A list of structs: row r's structs, field by field.
    let items = match objects.as_list_opt::<i32>() {
        Some(l) => l.value(r),
        None => objects.as_list_opt::<i64>()?.value(r),
    };
    let s = items.as_struct_opt()?;
    Some(
        s.fields()
            .iter()
            .map(|f| f.name().clone())
            .zip(s.columns().iter().cloned())
            .collect(),
    )
}

/// Row `r`'s instances, or (which object, why) one is bad; a category
/// must be one of `classes` names (when the schema names any).
fn instances(objects: &ArrayRef, r: usize, classes: usize) -> Result<Vec<Instance>, (String, String)> {
    let Some(cols) = object_columns(objects, r) else {
        return Ok(Vec::new());
    };
    let get = |name: &str| cols.iter().find(|(n, _)| n == name).map(|(_, a)| a);
    let (Some(bbox), Some(category)) = (get("bbox"), get("category")) else {
        return Ok(Vec::new());
    };
    let n = bbox.len();
    if n > stoker_core::targets::MAX_INSTANCES {
        return Err((
            format!("{n} objects"),
            format!("more than {} instances", stoker_core::targets::MAX_INSTANCES),
        ));
    }
    let ids = get("id").or_else(|| get("bbox_id"));
    let mut out = Vec::with_capacity(n);
    for j in 0..n {
        let dataset_id = ids.and_then(|a| number(a.as_ref(), j)).map(|v| v as i64);
        let id = match dataset_id {
            Some(d) => format!("object {j} (id {d})"),
            None => format!("object {j}"),
        };
        let values = list_numbers(bbox.as_ref(), j);
        if values.len() != 4 {
            return Err((format!("{id} (bbox {values:?})"), "bbox is not 4 numbers".to_owned()));
        }
        let category = number(category.as_ref(), j);
        let known = |c: f64| c.fract() == 0.0 && c >= 0.0 && (classes == 0 || c < classes as f64);
        let Some(label) = category.filter(|c| known(*c)) else {
            let shown = category.map_or_else(|| "null".to_owned(), |c| c.to_string());
            return Err((
                format!("{id} (category {shown})"),
                format!("category not in the ClassLabel's {classes} names"),
            ));
        };
        let flag = get("iscrowd").and_then(|a| number(a.as_ref(), j));
        out.push(Instance {
            bbox: [values[0], values[1], values[2], values[3]],
            label: label as i64,
            iscrowd: flag.is_some_and(|c| c != 0.0),
            area: get("area").and_then(|a| number(a.as_ref(), j)),
            id,
            ..Instance::default()
        });
    }
    Ok(out)
}

/// Element `j` of a list (or fixed-size list) array of numbers; a null
/// number is NaN.
fn list_numbers(a: &dyn Array, j: usize) -> Vec<f64> {
    if a.is_null(j) {
        return Vec::new();
    }
    let values = if let Some(l) = a.as_fixed_size_list_opt() {
        l.value(j)
    } else if let Some(l) = a.as_list_opt::<i32>() {
        l.value(j)
    } else if let Some(l) = a.as_list_opt::<i64>() {
        l.value(j)
    } else {
        return Vec::new();
    };
    (0..values.len())
        .map(|i| number(values.as_ref(), i).unwrap_or(f64::NAN))
        .collect()
}

/// A number cell as f64; `None` when null or not a number.
fn number(a: &dyn Array, i: usize) -> Option<f64> {
    if a.is_null(i) {
        return None;
    }
    Some(match a.data_type() {
        DataType::Float32 => f64::from(a.as_primitive::<Float32Type>().value(i)),
        DataType::Float64 => a.as_primitive::<Float64Type>().value(i),
        DataType::Int32 => f64::from(a.as_primitive::<Int32Type>().value(i)),
        DataType::Int64 => a.as_primitive::<Int64Type>().value(i) as f64,
        DataType::UInt32 => f64::from(a.as_primitive::<UInt32Type>().value(i)),
        DataType::UInt64 => a.as_primitive::<UInt64Type>().value(i) as f64,
        DataType::Boolean => f64::from(u8::from(a.as_boolean().value(i))),
        _ => return None,
    })
}
