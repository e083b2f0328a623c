//! The pipeline steps. Each step is a library function taking typed inputs (artifacts and
//! options) and returning a typed artifact; the CLI only parses arguments and calls them.

pub mod configure;
pub mod plan;
pub mod resolve;
