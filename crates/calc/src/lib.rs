pub mod cfg;
pub mod decode;
pub mod equiv;
