//! The x86-64 general registers as perf delivers them (`perf_regs.h` order).

/// `perf_regs.h` indices: AX BX CX DX SI DI BP SP IP FLAGS CS SS DS ES FS GS R8..R15.
pub const NUM: usize = 24;
pub const AX: usize = 0;
pub const BX: usize = 1;
pub const CX: usize = 2;
pub const DX: usize = 3;
pub const SI: usize = 4;
pub const DI: usize = 5;
pub const BP: usize = 6;
pub const SP: usize = 7;
pub const IP: usize = 8;
pub const R8: usize = 16;

/// `sample_regs_user`/`sample_regs_intr` mask of the registers an address
/// can be computed from: the 16 general registers and IP (segment
/// selectors and flags are useless for addresses and are left out).
pub const MASK: u64 = 0x1ff | (0xff << 16);

/// One sample's registers, indexed by `perf_regs.h` number; those not
/// sampled are `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs(pub [Option<u64>; NUM]);

impl Regs {
    /// Spreads the values perf wrote (in increasing index order of `mask`).
    pub fn from_masked(mask: u64, values: &[u64]) -> Regs {
        let mut r = Regs::default();
        let mut it = values.iter();
        for i in 0..NUM {
            if mask & (1 << i) != 0 {
                r.0[i] = it.next().copied();
            }
        }
        r
    }

    /// Value of the general register with DWARF number `n` (x86-64 psABI:
    /// RAX RDX RCX RBX RSI RDI RBP RSP R8..R15 as 0..15).
    pub fn dwarf(&self, n: u16) -> Option<u64> {
        const ORDER: [usize; 8] = [AX, DX, CX, BX, SI, DI, BP, SP];
        match n {
            0..=7 => self.0[ORDER[n as usize]],
            8..=15 => self.0[R8 + n as usize - 8],
            16 => self.0[IP],
            _ => None,
        }
    }

    pub fn set(&mut self, i: usize, v: u64) -> &mut Regs {
        self.0[i] = Some(v);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_values_land_on_their_indices() {
        // Checks that values are assigned in mask bit order and that DWARF numbering maps RDX=1, RBX=3, R9=9.
        let r = Regs::from_masked(MASK, &(0..17).collect::<Vec<u64>>());
        assert_eq!(r.0[AX], Some(0));
        assert_eq!(r.0[IP], Some(8));
        assert_eq!(r.0[9], None);
        assert_eq!(r.0[R8], Some(9));
        assert_eq!(r.dwarf(1), Some(3));
        assert_eq!(r.dwarf(3), Some(1));
        assert_eq!(r.dwarf(9), Some(10));
        assert_eq!(r.dwarf(16), Some(8));
    }
}
