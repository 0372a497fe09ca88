//! What flowguard's measurement programs (`src/bin`) share.

pub mod cli;
