//! Floating-point literals (issue 28): the compiler keeps the constants of
//! `x * 0.5` or `(double)n / 1e6` in read-only data no variable owns (`.LC0`
//! labels) and reads them with a scalar floating-point instruction whose
//! operand size says what they are: `movsd`/`addsd`/`ucomisd` a `double`,
//! `movss` a `float`, x87 `fldt` a `long double`. Only such a read of the very
//! address its RIP-relative operand names is typed, and only outside every
//! static and writable segment.

use super::{ImageTypes, Typed};
use iced_x86::{MemorySize, Register};

impl ImageTypes {
    /// The literal the instruction at `pc` reads at `vaddr` (ELF virtual
    /// addresses of one image), named by the type its instruction reads.
    pub fn literal_at(&self, pc: u64, vaddr: u64) -> Option<Typed> {
        if self.global_at(vaddr).is_some() || self.writable(vaddr) {
            return None;
        }
        let ins = self.instruction_at(pc)?;
        if ins.memory_base() != Register::RIP || ins.memory_index() != Register::None || ins.ip_rel_memory_address() != vaddr {
            return None;
        }
        let (name, size) = match ins.memory_size() {
            MemorySize::Float32 => ("float", 4),
            MemorySize::Float64 => ("double", 8),
            MemorySize::Float80 => ("long double", 10),
            _ => return None,
        };
        Some(Typed { type_name: format!("{name} (literal)"), field: String::new(), field_offset: 0, offset: 0, size })
    }
}

#[cfg(test)]
mod tests {
    use iced_x86::{MemorySize, Register};

    const SOURCE: &str = r#"
double scale_by;
__attribute__((noinline)) double scale(double x) { return x * 0.37 + scale_by; }
__attribute__((noinline)) float halve(float x) { return x * 0.61f; }
int main(int argc, char **argv) { (void)argv; return (int)(scale(argc) + halve(argc)); }
"#;

    #[test]
    fn floating_point_literals_are_named_by_the_instruction_reading_them() {
        // Checks at -O1 and -O2 that the RIP-relative reads of 0.37 in `scale` and 0.61f in `halve` are `double (literal)` and `float (literal)`, that the read of the static `scale_by` is not a literal, and that an address the operand does not name is not.
        for opt in ["-O1", "-O2"] {
            let bin = crate::types::built::c(SOURCE, &[opt]);
            let (t, sym) = (&bin.types, |n: &str| bin.symbols[n]);
            let rip_reads = |f: &str| -> Vec<(u64, u64, MemorySize)> {
                bin.function(f)
                    .iter()
                    .filter(|i| i.memory_base() == Register::RIP)
                    .map(|i| (i.ip(), i.ip_rel_memory_address(), i.memory_size()))
                    .collect()
            };
            let names =
                |f| -> Vec<Option<String>> { rip_reads(f).iter().map(|&(pc, a, _)| t.literal_at(pc, a).map(|x| x.type_name)).collect() };
            let scale = names("scale");
            assert!(scale.contains(&Some("double (literal)".into())), "{opt}: {scale:?}");
            let static_read = rip_reads("scale").into_iter().find(|&(_, a, _)| a == sym("scale_by").0).expect("scale reads scale_by");
            assert_eq!(t.literal_at(static_read.0, static_read.1), None, "{opt}: a static is no literal");
            assert_eq!(names("halve"), [Some("float (literal)".to_string())], "{opt}");
            let (pc, a, _) = rip_reads("halve")[0];
            assert_eq!(t.literal_at(pc, a + 4), None, "{opt}: another address than the operand's");
        }
    }
}
