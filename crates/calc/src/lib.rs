pub mod cfg;
pub mod decode;
pub mod equiv;
pub mod estimate;
pub mod mca;
