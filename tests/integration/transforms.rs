//! The transform ops against their reference (torchvision on PIL images,
//! reproduced with PIL), and the spec's interfaces (CLI, JSON, errors).
