//! The commands that read a trace log back, each a thin layer over
//! `tracer_model::log::LogReader`.

pub mod dump;
