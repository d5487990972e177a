//! One module per verb: load, change, save, render.

pub mod gate;
