// Empty: this crate only carries C sources (see Cargo.toml).
