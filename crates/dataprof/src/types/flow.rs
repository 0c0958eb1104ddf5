//! Type flow (issue 28): the type of a register at an instruction, found by
//! walking the function's instructions forward from its entry, as perf's
//! data-type profiling does. A register gets a type from a load of a typed
//! pointer (a static, a field of an object whose type is known, a local or
//! parameter by its DWARF location), from `lea` of a typed object or field,
//! from pointer arithmetic over a typed pointer, from a copy, or from the
//! return type of a called function; anything else that writes it makes it
//! unknown. Paths merge at branch targets keeping only what they agree on,
//! so a type is never guessed. The same walk from an allocator call's return
//! address finds where the new block goes: the type of that destination
//! types the block.

use super::{Hit, ImageTypes, TypeRef, Typed};
use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

/// What a register is known to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fact {
    /// A pointer this many bytes into an object of the type.
    Ptr(TypeRef, i64),
    /// A pointer walking an array of the type (paths met with it whole
    /// elements apart), this many bytes into an element (`0..size`).
    Elem(TypeRef, i64),
    /// The block the allocator just returned (allocation typing only).
    Alloc,
    /// The offset from the thread pointer of this many bytes into a
    /// thread-local of the type (read from its `TPOFF64` GOT slot): only
    /// an `%fs:` access through it reaches the variable.
    Tls(TypeRef, i64),
}

/// Facts by DWARF register number (0-15).
type State = [Option<Fact>; 16];

/// Caller-saved registers of the x86-64 psABI, by DWARF number.
const CALLER_SAVED: [usize; 9] = [0, 1, 2, 4, 5, 8, 9, 10, 11];

/// Instructions followed by the allocation typing, per allocation site.
const ALLOC_WALK: usize = 256;

/// Passes over a function before the flow is declared unsettled.
const MAX_PASSES: usize = 32;

pub(crate) struct FuncFlow {
    entry: u64,
    insns: Vec<Instruction>,
    at: HashMap<u64, usize>,
    /// State before each instruction; `None` where no direct path from the entry reaches it.
    states: Vec<Option<State>>,
}

impl FuncFlow {
    fn index(&self, pc: u64) -> Option<usize> {
        self.at.get(&pc).copied()
    }
}

/// Why a register's or a heap block's type stayed unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unknown {
    /// No DWARF function covers the instruction (no debug info).
    NoDebugInfo,
    /// The function's code could not be read or its type flow did not settle.
    NoCode,
    /// No direct branch path from the entry reaches the instruction (jump tables).
    Unreached,
    /// The base register's value came from something without a type.
    UntypedRegister,
    /// The instruction addresses memory without a base register.
    NoBaseRegister,
    /// The block was returned by an allocation wrapper typed `void *`, and
    /// no caller the allocation log kept above it stores it typed.
    Wrapper,
    /// The block was never stored into a typed place within reach.
    NoDestination,
    /// The instruction is in an assembly routine (glibc's `memcpy`,
    /// `strchrnul`, `__mpn_mul_1`): it has no variables, its pointers are its
    /// caller's, and the sample holds no caller frame to take them from.
    Assembly,
}

impl Unknown {
    pub fn label(self) -> &'static str {
        match self {
            Unknown::NoDebugInfo => "no debug info",
            Unknown::NoCode => "code unreadable",
            Unknown::Unreached => "not reached by type flow",
            Unknown::UntypedRegister => "base register untyped",
            Unknown::NoBaseRegister => "no base register",
            Unknown::Wrapper => "allocated in an untyped wrapper",
            Unknown::NoDestination => "allocation stored nowhere typed",
            Unknown::Assembly => "in an assembly routine",
        }
    }
}

/// A heap block's type from its allocation site, or why there is none.
pub type AllocType = Result<TypeRef, Unknown>;

/// DWARF number of a 64-bit general register.
fn reg64(r: Register) -> Option<usize> {
    crate::interp::dwarf_number(r).map(usize::from).filter(|&n| n < 16)
}

/// Register operand `i` when it is a 64-bit general register.
fn reg_op(ins: &Instruction, i: u32) -> Option<usize> {
    (ins.op_kind(i) == OpKind::Register).then(|| reg64(ins.op_register(i))).flatten()
}

fn immediate(ins: &Instruction) -> Option<i64> {
    match ins.op1_kind() {
        OpKind::Immediate8to64 | OpKind::Immediate32to64 | OpKind::Immediate8 | OpKind::Immediate32 | OpKind::Immediate8to32 => {
            Some(ins.immediate(1) as i64)
        }
        _ => None,
    }
}

/// Joins the state of another path into a branch target's; `join` gives
/// what two different facts still agree on (see [`ImageTypes::join_elements`]).
fn merge(into: &mut Option<State>, s: &State, join: &dyn Fn(Fact, Fact) -> Option<Fact>) -> bool {
    match into {
        None => {
            *into = Some(*s);
            true
        }
        Some(old) => {
            let mut changed = false;
            for (o, n) in old.iter_mut().zip(s) {
                let joined = match (*o, *n) {
                    (Some(a), Some(b)) if a == b => Some(a),
                    (Some(a), Some(b)) => join(a, b),
                    _ => None,
                };
                if *o != joined {
                    *o = joined;
                    changed = true;
                }
            }
            changed
        }
    }
}

/// What the allocation typing found at one instruction.
enum Dest {
    Typed(TypeRef),
    Wrapper,
    Nothing,
}

impl ImageTypes {
    /// The type and field of the memory at `offset` from register `reg`
    /// (DWARF number) at the instruction at `pc`, by type flow.
    pub fn flow_pointee(&self, pc: u64, reg: u16, offset: i64) -> Result<Typed, Unknown> {
        let f = self.flow_at(pc)?;
        let i = f.index(pc).ok_or(Unknown::NoCode)?;
        let s = f.states[i].ok_or(Unknown::Unreached)?;
        match s.get(usize::from(reg)).copied().flatten() {
            Some(Fact::Ptr(t, o)) if o + offset >= 0 => Ok(self.describe(t, (o + offset) as u64)),
            Some(Fact::Elem(t, o)) => Ok(self.describe(t, self.in_element(t, o + offset))),
            _ => Err(Unknown::UntypedRegister),
        }
    }

    /// The type of the block an allocator call returning to `ret` made:
    /// the type of the first typed place the returned pointer reaches.
    pub fn alloc_type(&self, ret: u64) -> AllocType {
        let f = self.flow_at(ret)?;
        let start = f.index(ret).ok_or(Unknown::NoCode)?;
        let mut s = f.states[start].unwrap_or([None; 16]);
        s[0] = Some(Fact::Alloc);
        let (mut work, mut seen, mut why) = (vec![(start, s)], HashSet::new(), Unknown::NoDestination);
        while let Some((mut i, mut s)) = work.pop() {
            while i < f.insns.len() && seen.len() < ALLOC_WALK && seen.insert(i) {
                let ins = &f.insns[i];
                match self.destination(&f, &s, ins) {
                    Dest::Typed(t) => return Ok(t),
                    Dest::Wrapper => why = Unknown::Wrapper,
                    Dest::Nothing => {}
                }
                self.step(&mut s, ins);
                if !s.contains(&Some(Fact::Alloc)) {
                    break;
                }
                match ins.flow_control() {
                    FlowControl::UnconditionalBranch => match f.index(ins.near_branch_target()) {
                        Some(t) => i = t,
                        None => break,
                    },
                    FlowControl::ConditionalBranch => {
                        if let Some(t) = f.index(ins.near_branch_target()) {
                            work.push((t, s));
                        }
                        i += 1;
                    }
                    FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall => i += 1,
                    _ => break,
                }
            }
        }
        Err(why)
    }

    /// A typed place the block reaches at this instruction: a pointer
    /// variable now held in one of its registers, a store into a typed
    /// pointer, the first parameter of a called function (a constructor's
    /// `this`), or the wrapper's own return type.
    fn destination(&self, f: &FuncFlow, s: &State, ins: &Instruction) -> Dest {
        for r in (0..16).filter(|&r| s[r] == Some(Fact::Alloc)) {
            if let Some(Hit::InReg(v)) = self.variable_cached(ins.ip(), r as u16, 0) {
                if let Some(p) = self.pointee_ref(v) {
                    return Dest::Typed(p);
                }
            }
        }
        let stored = ins.mnemonic() == Mnemonic::Mov
            && ins.op0_kind() == OpKind::Memory
            && reg_op(ins, 1).is_some_and(|r| s[r] == Some(Fact::Alloc));
        if stored {
            if let Some(p) = self.place(s, ins).and_then(|(t, off)| self.leaf_at(t, off)).and_then(|l| self.pointee_ref(l)) {
                return Dest::Typed(p);
            }
        }
        match ins.flow_control() {
            FlowControl::Call if s[5] == Some(Fact::Alloc) => match self.first_param(ins.near_branch_target()) {
                Some(p) => Dest::Typed(p),
                None => Dest::Nothing,
            },
            FlowControl::Return if s[0] == Some(Fact::Alloc) => match self.returns(f.entry) {
                Some(p) => Dest::Typed(p),
                None => Dest::Wrapper,
            },
            _ => Dest::Nothing,
        }
    }

    fn flow_at(&self, pc: u64) -> Result<Rc<FuncFlow>, Unknown> {
        let (low, high) = self.function_bounds(pc).ok_or(Unknown::NoDebugInfo)?;
        if let Some(f) = self.flows.borrow().get(&low) {
            return f.clone().ok_or(Unknown::NoCode);
        }
        let f = self.analyse(low, high).map(Rc::new);
        self.flows.borrow_mut().insert(low, f.clone());
        f.ok_or(Unknown::NoCode)
    }

    /// Forward data flow over the function until the states settle.
    fn analyse(&self, low: u64, high: u64) -> Option<FuncFlow> {
        let code = self.code(low, high)?;
        let insns: Vec<Instruction> =
            Decoder::with_ip(64, code, low, DecoderOptions::NONE).into_iter().take_while(|i| !i.is_invalid()).collect();
        let at: HashMap<u64, usize> = insns.iter().enumerate().map(|(i, ins)| (ins.ip(), i)).collect();
        // Jump-table targets are unknown: an indirect jump may reach any block that no fall-through enters.
        let labels: Vec<usize> = (1..insns.len())
            .filter(|&i| {
                matches!(insns[i - 1].flow_control(), FlowControl::UnconditionalBranch | FlowControl::Return | FlowControl::IndirectBranch)
            })
            .collect();
        let join = |a, b| self.join_elements(a, b);
        let merge = |into: &mut Option<State>, s: &State| merge(into, s, &join);
        let mut states: Vec<Option<State>> = vec![None; insns.len()];
        *states.first_mut()? = Some([None; 16]);
        for _ in 0..MAX_PASSES {
            let mut changed = false;
            for i in 0..insns.len() {
                let Some(mut s) = states[i] else { continue };
                let ins = &insns[i];
                self.step(&mut s, ins);
                let fc = ins.flow_control();
                let falls = !matches!(fc, FlowControl::UnconditionalBranch | FlowControl::Return | FlowControl::IndirectBranch);
                if falls && i + 1 < insns.len() {
                    changed |= merge(&mut states[i + 1], &s);
                }
                if matches!(fc, FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch) {
                    if let Some(&t) = at.get(&ins.near_branch_target()) {
                        changed |= merge(&mut states[t], &s);
                    }
                }
                if fc == FlowControl::IndirectBranch {
                    for &t in &labels {
                        changed |= merge(&mut states[t], &s);
                    }
                }
            }
            if !changed {
                return Some(FuncFlow { entry: low, insns, at, states });
            }
        }
        None
    }

    /// The registers' facts after `ins`.
    fn step(&self, s: &mut State, ins: &Instruction) {
        let dst = reg_op(ins, 0);
        match (ins.mnemonic(), dst) {
            (Mnemonic::Mov, Some(d)) => {
                s[d] = match ins.op1_kind() {
                    OpKind::Register => reg64(ins.op1_register()).and_then(|r| s[r].or_else(|| self.register_variable(ins.ip(), r))),
                    OpKind::Memory => self.load_fact(s, ins),
                    _ => None,
                };
                return;
            }
            (Mnemonic::Lea, Some(d)) => {
                s[d] = self.place(s, ins).map(|(t, off)| Fact::Ptr(t, off as i64));
                return;
            }
            (Mnemonic::Add | Mnemonic::Sub, Some(d)) => {
                s[d] = self.arithmetic(s, ins, d);
                return;
            }
            _ => {}
        }
        if matches!(ins.flow_control(), FlowControl::Call | FlowControl::IndirectCall) {
            for r in CALLER_SAVED {
                s[r] = None;
            }
            if ins.flow_control() == FlowControl::Call {
                s[0] = self.returns(ins.near_branch_target()).map(|t| Fact::Ptr(t, 0));
            }
            return;
        }
        let mut factory = InstructionInfoFactory::new();
        for u in factory.info(ins).used_registers() {
            let writes = matches!(u.access(), OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite);
            if let Some(r) = reg64(u.register().full_register()).filter(|_| writes) {
                s[r] = None;
            }
        }
    }

    /// Two pointers into objects of one type at the same offset in their
    /// element are one pointer walking an array: a loop stepping a `T *`
    /// (`p--` over `mp_limb_t`s, `p++` over structs) enters its head with
    /// the pointer whole elements apart on each path, as C pointer
    /// arithmetic moves it, so the field it reaches is the same.
    fn join_elements(&self, a: Fact, b: Fact) -> Option<Fact> {
        let (Fact::Ptr(t, x) | Fact::Elem(t, x), Fact::Ptr(u, y) | Fact::Elem(u, y)) = (a, b) else { return None };
        let size = self.size_of(t.ui, &self.units[t.ui], t.ty) as i64;
        (t == u && size > 0 && (x - y) % size == 0).then(|| Fact::Elem(t, x.rem_euclid(size)))
    }

    /// An offset from a pointer walking an array of `t`, in its element.
    fn in_element(&self, t: TypeRef, off: i64) -> u64 {
        off.rem_euclid(self.size_of(t.ui, &self.units[t.ui], t.ty).max(1) as i64) as u64
    }

    /// `add`/`sub` on a register: a constant moves a typed pointer inside
    /// its object; adding a register to a typed pointer steps over array
    /// elements of its type (C pointer arithmetic), so the offset in the
    /// element is kept.
    fn arithmetic(&self, s: &State, ins: &Instruction, d: usize) -> Option<Fact> {
        let sub = ins.mnemonic() == Mnemonic::Sub;
        if let Some(k) = immediate(ins) {
            return match s[d] {
                Some(Fact::Ptr(t, o)) => Some(Fact::Ptr(t, if sub { o - k } else { o + k })),
                Some(Fact::Elem(t, o)) => Some(Fact::Elem(t, self.in_element(t, if sub { o - k } else { o + k }) as i64)),
                _ => None,
            };
        }
        let src = reg_op(ins, 1).and_then(|r| s[r]);
        match (s[d], src, sub) {
            (Some(p @ (Fact::Ptr(..) | Fact::Elem(..))), None, _) => Some(p),
            (None, Some(p @ (Fact::Ptr(..) | Fact::Elem(..))), false) => Some(p),
            _ => None,
        }
    }

    /// A load into a register: the pointer type of the loaded member.
    fn load_fact(&self, s: &State, ins: &Instruction) -> Option<Fact> {
        if ins.memory_base() == Register::RIP {
            // The address of a typed static, from its global offset table slot.
            if let Some(t) = self.got_target(ins.ip_rel_memory_address()) {
                return Some(Fact::Ptr(t, 0));
            }
            if let Some((t, off)) = self.got_tls(ins.ip_rel_memory_address()) {
                return Some(Fact::Tls(t, off as i64));
            }
        }
        let (t, off) = if ins.segment_prefix() == Register::FS { self.tls_place(s, ins)? } else { self.place(s, ins)? };
        let p = self.pointee_ref(self.leaf_at(t, off)?)?;
        Some(Fact::Ptr(p, 0))
    }

    /// The thread-local an `%fs:` operand reaches through a register holding
    /// its offset from the thread pointer (no index), and the offset into it.
    fn tls_place(&self, s: &State, ins: &Instruction) -> Option<(TypeRef, u64)> {
        let b = reg64(ins.memory_base())?;
        let Some(Fact::Tls(t, o)) = s[b] else { return None };
        if ins.memory_index() != Register::None {
            return None;
        }
        u64::try_from(o + ins.memory_displacement64() as i64).ok().map(|off| (t, off))
    }

    /// The typed object the memory operand of `ins` addresses, and the
    /// offset into it: a static, what a typed register points to, or a
    /// variable by its DWARF location.
    fn place(&self, s: &State, ins: &Instruction) -> Option<(TypeRef, u64)> {
        let base = ins.memory_base();
        if base == Register::RIP {
            return self.static_raw(ins.ip_rel_memory_address());
        }
        if base == Register::None {
            return self.static_raw(ins.memory_displacement64());
        }
        let b = reg64(base)?;
        let disp = ins.memory_displacement64() as i64;
        match s[b] {
            Some(Fact::Ptr(t, o)) => u64::try_from(o + disp).ok().map(|off| (t, off)),
            Some(Fact::Elem(t, o)) => Some((t, self.in_element(t, o + disp))),
            Some(Fact::Alloc | Fact::Tls(..)) => None,
            None => match self.variable_cached(ins.ip(), b as u16, disp) {
                Some(Hit::InReg(v)) => Some((self.pointee_ref(v)?, u64::try_from(disp).ok()?)),
                Some(Hit::InMem(v, off)) => Some((v, off as u64)),
                // A value spilled to the stack and loaded back keeps its type.
                None => self.spill_place(ins.ip(), b as u16, disp),
            },
        }
    }

    /// A pointer-typed DWARF variable held in register `r` at `pc`.
    fn register_variable(&self, pc: u64, r: usize) -> Option<Fact> {
        match self.variable_cached(pc, r as u16, 0)? {
            Hit::InReg(v) => Some(Fact::Ptr(self.pointee_ref(v)?, 0)),
            Hit::InMem(..) => None,
        }
    }

    fn variable_cached(&self, pc: u64, reg: u16, offset: i64) -> Option<Hit> {
        if let Some(h) = self.vars.borrow().get(&(pc, reg, offset)) {
            return *h;
        }
        let h = self.variable_at(pc, reg, offset);
        self.vars.borrow_mut().insert((pc, reg, offset), h);
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSymbol};

    /// Builds a workload from `testdata/workloads` with the compiler and flags given.
    fn build(src: &str, cc: &str, opt: &str) -> (tempfile::TempDir, ImageTypes, HashMap<String, (u64, u64)>) {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("w");
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/workloads").join(src);
        let st = std::process::Command::new(cc).args([opt, "-g", "-o"]).arg(&bin).arg(&src).arg("-lpthread").status().expect(cc);
        assert!(st.success(), "{cc} {opt} {}", src.display());
        let data = std::fs::read(&bin).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let syms = file.symbols().filter_map(|s| Some((s.name().ok()?.to_string(), (s.address(), s.size())))).collect();
        (dir, ImageTypes::load(&bin).unwrap(), syms)
    }

    fn insns(t: &ImageTypes, (addr, size): (u64, u64)) -> Vec<Instruction> {
        Decoder::with_ip(64, t.code(addr, addr + size).unwrap(), addr, DecoderOptions::NONE).into_iter().collect()
    }

    /// The first instruction of a function that dereferences a general register: (pc, DWARF base, displacement).
    fn first_deref(t: &ImageTypes, f: (u64, u64)) -> (u64, u16, i64) {
        let i = insns(t, f).into_iter().find(|i| i.op_kinds().any(|k| k == OpKind::Memory) && reg64(i.memory_base()).is_some()).unwrap();
        (i.ip(), reg64(i.memory_base()).unwrap() as u16, i.memory_displacement64() as i64)
    }

    /// Return address of the first direct call in a function.
    fn after_call(t: &ImageTypes, f: (u64, u64)) -> u64 {
        insns(t, f).into_iter().find(|i| i.flow_control() == FlowControl::Call).unwrap().next_ip()
    }

    fn named(t: Typed) -> (String, String) {
        (t.type_name, t.field)
    }

    #[test]
    fn registers_loaded_from_typed_statics_name_type_and_field() {
        // Checks at -O1 and -O2 that `pair->left++` / `outer->in[2].b++` (base loaded from a typed static pointer) are typed by flow, with the nested array field folded.
        for opt in ["-O1", "-O2"] {
            let (_d, t, syms) = build("dtypes.c", "cc", opt);
            let (pc, reg, disp) = first_deref(&t, syms["bump_left"]);
            assert_eq!(t.pointee_at(pc, reg, disp), None, "{opt}: no DWARF variable holds the loaded pointer");
            assert_eq!(named(t.flow_pointee(pc, reg, disp).unwrap()), ("struct tally_pair".into(), "left".into()), "{opt}");
            let (pc, reg, disp) = first_deref(&t, syms["bump_right"]);
            assert_eq!(named(t.flow_pointee(pc, reg, disp).unwrap()), ("struct tally_pair".into(), "right".into()), "{opt}");
            let (pc, reg, disp) = first_deref(&t, syms["bump_inner"]);
            assert_eq!(named(t.flow_pointee(pc, reg, disp).unwrap()), ("struct outer".into(), "in.b".into()), "{opt}");
        }
    }

    #[test]
    fn heap_blocks_take_the_type_of_where_their_pointer_goes() {
        // Checks at -O1 and -O2: stored into a typed static, into another struct's field, kept in a typed local; a void* wrapper says why it is untyped.
        for opt in ["-O1", "-O2"] {
            let (_d, t, syms) = build("dtypes.c", "cc", opt);
            let ty = |f: &str| t.alloc_type(after_call(&t, syms[f])).map(|r| named(t.describe(r, 8)));
            let pair = Ok(("struct tally_pair".to_string(), "right".to_string()));
            assert_eq!(ty("alloc_static"), pair, "{opt}");
            assert_eq!(ty("alloc_field"), pair, "{opt}");
            assert_eq!(ty("new_node"), Ok(("struct node".into(), "next".into())), "{opt}");
            assert_eq!(ty("xmalloc"), Err(Unknown::Wrapper), "{opt}");
        }
    }

    #[test]
    fn a_void_wrappers_callers_type_its_blocks() {
        // Checks at -O1 and -O2 that both levels of xmalloc -> xalloc are untyped wrappers and their callers' stores into `struct rec_a *`/`struct rec_b *` type the block, field and offset included.
        for opt in ["-O1", "-O2"] {
            let (_d, t, syms) = build("dtypes.c", "cc", opt);
            let field = |f: &str, off: u64| {
                t.alloc_type(after_call(&t, syms[f])).map(|r| t.describe(r, off)).map(|d| (d.type_name, d.field, d.field_offset))
            };
            assert_eq!(t.alloc_type(after_call(&t, syms["xalloc"])), Err(Unknown::Wrapper), "{opt}");
            assert_eq!(t.alloc_type(after_call(&t, syms["xmalloc"])), Err(Unknown::Wrapper), "{opt}");
            assert_eq!(field("make_a", 8), Ok(("struct rec_a".into(), "hits".into(), 8)), "{opt}");
            assert_eq!(field("make_b", 20), Ok(("struct rec_b".into(), "total".into(), 16)), "{opt}");
        }
    }

    #[test]
    fn cpp_new_is_typed_by_its_constructor() {
        // Checks that `new Counter()` is typed by the constructor's `this` and that `counter->hits++` is typed by flow, at -O1 and -O2.
        for opt in ["-O1", "-O2"] {
            let (_d, t, syms) = build("dtypes.cc", "c++", opt);
            let make = syms.iter().find(|(k, _)| k.contains("make_counter")).unwrap().1;
            let got = t.alloc_type(after_call(&t, *make)).map(|r| named(t.describe(r, 8)));
            assert_eq!(got, Ok(("class Counter".into(), "misses".into())), "{opt}");
            let hit = syms.iter().find(|(k, _)| k.contains("3hit")).unwrap().1;
            let (pc, reg, disp) = first_deref(&t, *hit);
            assert_eq!(named(t.flow_pointee(pc, reg, disp).unwrap()), ("class Counter".into(), "hits".into()), "{opt}");
        }
    }

    /// A loop the compiler strength-reduces into one pointer stepped back a
    /// whole `struct item` per iteration; no DWARF variable holds it.
    const WALK: &str = r#"
struct item { long key; long v; };
struct table { long n; struct item *items; };
__attribute__((noinline)) void walk(struct table *t, long d) {
    for (long i = t->n; i-- > 0;) t->items[i].v = t->items[i].key / d;
}
int main(void) { struct item it[4] = {{1, 0}, {2, 0}, {3, 0}, {4, 0}}; struct table t = {4, it}; walk(&t, 3); return (int)it[2].v; }
"#;

    #[test]
    fn a_pointer_stepped_over_an_array_in_a_loop_keeps_its_type() {
        // Checks at -O2 that in `walk` the loop's load of items[i].key and store to items[i].v, through a pointer `sub`'d by 16 each iteration (no DWARF variable in it), are struct item.key and .v by type flow: the loop head joins the entry's pointer and the back edge's one element apart.
        let bin = crate::types::built::c(WALK, &["-O2"]);
        let (t, code) = (&bin.types, bin.function("walk"));
        let step = code.iter().find(|i| i.mnemonic() == Mnemonic::Sub && i.immediate(1) == 16).expect("a pointer stepped by one element");
        let walker = step.op0_register();
        let mut fields = Vec::new();
        for i in code.iter().filter(|i| i.op_kinds().any(|k| k == OpKind::Memory) && i.memory_base() == walker) {
            let (reg, disp) = (reg64(walker).unwrap() as u16, i.memory_displacement64() as i64);
            assert_eq!(t.pointee_at(i.ip(), reg, disp), None, "a DWARF variable holds the walking pointer: nothing to check");
            fields.push(named(t.flow_pointee(i.ip(), reg, disp).unwrap()).1);
        }
        fields.sort();
        assert_eq!(fields, ["key", "v"]);
        assert_eq!(named(t.flow_pointee(step.ip(), reg64(walker).unwrap() as u16, 8).unwrap()).0, "struct item");
    }

    #[test]
    fn merging_paths_forgets_what_they_disagree_on() {
        // Checks the merge rule: an unreached target takes the state; a disagreeing register becomes unknown; agreement stays.
        let a = TypeRef { ui: 0, ty: gimli::UnitOffset(1) };
        let b = TypeRef { ui: 0, ty: gimli::UnitOffset(2) };
        let mut s1: State = [None; 16];
        s1[0] = Some(Fact::Ptr(a, 0));
        s1[3] = Some(Fact::Ptr(a, 8));
        let mut into = None;
        let never = |_, _| None;
        assert!(merge(&mut into, &s1, &never));
        let mut s2 = s1;
        s2[0] = Some(Fact::Ptr(b, 0));
        assert!(merge(&mut into, &s2, &never));
        assert_eq!((into.unwrap()[0], into.unwrap()[3]), (None, Some(Fact::Ptr(a, 8))));
        assert!(!merge(&mut into, &s2, &never));
        // A pointer one element further on the other path joins into one walking the array.
        let mut s3 = s2;
        s3[3] = Some(Fact::Ptr(a, 24));
        let elements = |x: Fact, y: Fact| match (x, y) {
            (Fact::Ptr(t, i) | Fact::Elem(t, i), Fact::Ptr(u, j)) if t == u && (i - j) % 16 == 0 => Some(Fact::Elem(t, i.rem_euclid(16))),
            _ => None,
        };
        assert!(merge(&mut into, &s3, &elements));
        assert_eq!(into.unwrap()[3], Some(Fact::Elem(a, 8)));
        assert!(!merge(&mut into, &s3, &elements), "joined once, it stays");
    }
}
