//! Address to data type from an image's DWARF (DProf §4.2 a and c):
//! statics by their `DW_OP_addr` location (or, without DWARF, the ELF
//! object symbol), and the object a register points to from the DWARF
//! location of the variable held in that register at the instruction, as
//! perf's data-type profiling does. Types are named as in the source
//! (`struct counters`, a typedef's name) and fields found by offset.

use crate::error::{err, ErrorKind, Result};
use gimli::{AttributeValue, EndianSlice, RunTimeEndian, UnitOffset};
use object::{Object, ObjectSegment, ObjectSymbol};
use std::path::Path;

mod flow;
mod frame;
mod got;
mod literal;
mod pointed;
mod slots;
mod spill;
mod tls;
pub use flow::{AllocType, Unknown};
pub use frame::FRAME_TYPE;
pub use got::GOT_TYPE;

type R = EndianSlice<'static, RunTimeEndian>;

/// A type and the field at an offset inside it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Typed {
    pub type_name: String,
    /// Dotted member path (`inner.x`); empty for scalars.
    pub field: String,
    /// Where that field starts in the type (array elements folded to the first).
    pub field_offset: u64,
    /// Offset of the address inside the object (its element, for arrays).
    pub offset: u64,
    /// Size of one object of the type (for arrays: of one element).
    pub size: u64,
}

/// What (c) looks for: the register an instruction at `pc` dereferences,
/// the offset from it, and the function's frame base there.
struct Query {
    pc: u64,
    reg: u16,
    offset: i64,
    frame: Option<(u16, i64)>,
}

/// A type inside one compilation unit: what the type flow carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TypeRef {
    pub(crate) ui: usize,
    pub(crate) ty: UnitOffset,
}

/// A variable found for a register at a PC, before naming.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Hit {
    /// The variable's value is in the register (type of the variable).
    InReg(TypeRef),
    /// The variable lives in memory; the access is this far into it.
    InMem(TypeRef, i64),
}

struct Global {
    addr: u64,
    size: u64,
    unit: usize,
    ty: Option<UnitOffset>,
    name: String,
}

struct Func {
    low: u64,
    high: u64,
    unit: usize,
    die: UnitOffset,
}

struct Load {
    vaddr: u64,
    offset: u64,
    filesz: u64,
    /// With the zero-filled tail (.bss) that shares the file mapping's last page.
    memsz: u64,
    writable: bool,
}

pub struct ImageTypes {
    dwarf: gimli::Dwarf<R>,
    /// Call frame information: where the CFA is at a PC (frame bases of
    /// `DW_OP_call_frame_cfa` functions).
    eh_frame: Option<(gimli::EhFrame<R>, gimli::BaseAddresses)>,
    units: Vec<gimli::Unit<R>>,
    globals: Vec<Global>,
    funcs: Vec<Func>,
    loads: Vec<Load>,
    /// The whole file: code for the type flow.
    data: &'static [u8],
    /// Type flow per function (by entry), computed on first use.
    flows: std::cell::RefCell<std::collections::HashMap<u64, Option<std::rc::Rc<flow::FuncFlow>>>>,
    /// `variable_at` answers, memoized: the flow asks the same ones on every pass.
    vars: std::cell::RefCell<std::collections::HashMap<(u64, u16, i64), Option<Hit>>>,
    /// Relative dynamic relocations (place, target): the image's initialized pointers.
    relocs: Vec<(u64, u64)>,
    /// Global offset table slots by their dynamic relocations.
    got: Vec<got::Slot>,
    /// Spill slots per function (by entry), found on first use.
    spills: std::cell::RefCell<std::collections::HashMap<u64, Option<std::rc::Rc<spill::Spills>>>>,
    /// Thread-local variables by their offset in the image's TLS block, sorted.
    tls: Vec<tls::TlsVar>,
    /// What typed static pointers point to, built on first use.
    pointed: std::cell::RefCell<Option<Vec<pointed::Pointed>>>,
    pub has_dwarf: bool,
}

/// Where separate debug files are found by build-id: `DIR/.build-id/xx/rest.debug`.
const DEBUG_DIRS: [&str; 1] = ["/usr/lib/debug"];

/// The separate debug file of `file` by its GNU build-id, parsed (its bytes
/// live as long as the analysis, like the image's), when it has DWARF.
fn separate_debug_file(file: &object::File) -> Option<object::File<'static>> {
    let id = file.build_id().ok()??;
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let (head, rest) = (hex.get(..2)?, hex.get(2..)?);
    DEBUG_DIRS.iter().find_map(|dir| {
        let data = std::fs::read(Path::new(dir).join(".build-id").join(head).join(format!("{rest}.debug"))).ok()?;
        let data: &'static [u8] = Box::leak(data.into_boxed_slice());
        object::File::parse(data).ok().filter(|f| f.section_by_name(".debug_info").is_some())
    })
}

impl ImageTypes {
    pub fn load(path: &Path) -> Result<ImageTypes> {
        let data = std::fs::read(path).map_err(|e| err(ErrorKind::Dwarf, format_args!("reading {}", path.display()), e))?;
        // Lives as long as the analysis command: the DWARF readers borrow it.
        let data: &'static [u8] = Box::leak(data.into_boxed_slice());
        let file = object::File::parse(data).map_err(|e| err(ErrorKind::Dwarf, format_args!("{}: not an ELF file", path.display()), e))?;
        let endian = if file.is_little_endian() { RunTimeEndian::Little } else { RunTimeEndian::Big };
        // A stripped image's DWARF lives in its separate debug file (Debian's libc6-dbg for the C library).
        let separate = if file.section_by_name(".debug_info").is_some() { None } else { separate_debug_file(&file) };
        let dwarf_file = separate.as_ref().unwrap_or(&file);
        let load_section = |id: gimli::SectionId| -> std::result::Result<R, gimli::Error> {
            let bytes = match object::ObjectSection::uncompressed_data(&match dwarf_file.section_by_name(id.name()) {
                Some(s) => s,
                None => return Ok(EndianSlice::new(&[], endian)),
            }) {
                Ok(b) => b,
                Err(_) => return Ok(EndianSlice::new(&[], endian)),
            };
            let bytes: &'static [u8] = match bytes {
                std::borrow::Cow::Borrowed(b) => b,
                std::borrow::Cow::Owned(v) => Box::leak(v.into_boxed_slice()),
            };
            Ok(EndianSlice::new(bytes, endian))
        };
        let dwarf = gimli::Dwarf::load(load_section)?;
        let loads = file
            .segments()
            .map(|s| {
                let (offset, filesz) = s.file_range();
                let writable = match s.flags() {
                    object::SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_W != 0,
                    _ => true,
                };
                Load { vaddr: s.address(), offset, filesz, memsz: s.size(), writable }
            })
            .collect();
        let eh_frame = file.section_by_name(".eh_frame").and_then(|sec| {
            let data = object::ObjectSection::data(&sec).ok()?;
            let mut bases = gimli::BaseAddresses::default().set_eh_frame(object::ObjectSection::address(&sec));
            if let Some(text) = file.section_by_name(".text") {
                bases = bases.set_text(object::ObjectSection::address(&text));
            }
            Some((gimli::EhFrame::new(data, endian), bases))
        });
        let mut t = ImageTypes {
            dwarf,
            eh_frame,
            units: Vec::new(),
            globals: Vec::new(),
            funcs: Vec::new(),
            loads,
            data,
            flows: Default::default(),
            vars: Default::default(),
            relocs: ImageTypes::relative_relocations(&file),
            got: ImageTypes::got_slots(&file),
            pointed: Default::default(),
            spills: Default::default(),
            tls: Vec::new(),
            has_dwarf: false,
        };
        t.index()?;
        t.has_dwarf = !t.units.is_empty();
        t.add_symbols(&file);
        t.globals.sort_by_key(|g| g.addr);
        t.funcs.sort_by_key(|f| f.low);
        t.tls.sort_by_key(|v| v.offset());
        Ok(t)
    }

    /// ELF virtual address of a file offset inside a loaded segment (or
    /// its page-aligned start).
    pub fn vaddr_of(&self, file_offset: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| (l.offset & !0xfff) <= file_offset && file_offset < l.offset + l.filesz.max(l.memsz).max(1))
            .map(|l| (l.vaddr + file_offset).wrapping_sub(l.offset))
    }

    fn index(&mut self) -> Result<()> {
        let mut headers = self.dwarf.units();
        while let Some(h) = headers.next()? {
            let unit = self.dwarf.unit(h)?;
            let ui = self.units.len();
            let mut entries = unit.entries();
            while let Some((_, e)) = entries.next_dfs()? {
                match e.tag() {
                    gimli::DW_TAG_subprogram => {
                        if let Ok(mut ranges) = self.dwarf.die_ranges(&unit, e) {
                            while let Ok(Some(r)) = ranges.next() {
                                if r.begin < r.end {
                                    self.funcs.push(Func { low: r.begin, high: r.end, unit: ui, die: e.offset() });
                                }
                            }
                        }
                    }
                    gimli::DW_TAG_variable => {
                        if let Some(g) = self.global(&unit, ui, e) {
                            self.globals.push(g);
                        } else if let Some(v) = self.tls_var(&unit, ui, e) {
                            self.tls.push(v);
                        }
                    }
                    _ => {}
                }
            }
            self.units.push(unit);
        }
        Ok(())
    }

    fn global(&self, unit: &gimli::Unit<R>, ui: usize, e: &gimli::DebuggingInformationEntry<R>) -> Option<Global> {
        let AttributeValue::Exprloc(expr) = e.attr_value(gimli::DW_AT_location).ok()?? else { return None };
        let mut ops = expr.operations(unit.encoding());
        let gimli::Operation::Address { address } = ops.next().ok()?? else { return None };
        // C++ static members and definitions of declared variables keep name and type on the declaration.
        let decl = match e.attr_value(gimli::DW_AT_specification).ok()? {
            Some(AttributeValue::UnitRef(o)) => unit.entry(o).ok(),
            _ => None,
        };
        let from = |a| e.attr_value(a).ok().flatten().or_else(|| decl.as_ref().and_then(|d| d.attr_value(a).ok().flatten()));
        let ty = match from(gimli::DW_AT_type) {
            Some(AttributeValue::UnitRef(o)) => Some(o),
            _ => None,
        };
        let name = from(gimli::DW_AT_name).and_then(|v| self.dwarf.attr_string(unit, v).ok()).map(|s| s.to_string_lossy().into_owned());
        let size = ty.map_or(0, |t| self.size_of(ui, unit, t));
        Some(Global { addr: address, size: size.max(1), unit: ui, ty, name: name.unwrap_or_else(|| "?".into()) })
    }

    /// Object symbols no DWARF variable covers: named, untyped.
    fn add_symbols(&mut self, file: &object::File) {
        let mut known: Vec<(u64, u64)> = self.globals.iter().map(|g| (g.addr, g.addr + g.size)).collect();
        known.sort();
        for s in file.symbols() {
            if s.kind() != object::SymbolKind::Data || s.size() == 0 {
                continue;
            }
            let a = s.address();
            let covered = known.partition_point(|&(start, _)| start <= a).checked_sub(1).is_some_and(|i| a < known[i].1);
            if !covered {
                let name = s.name().unwrap_or("?").to_string();
                self.globals.push(Global { addr: a, size: s.size(), unit: usize::MAX, ty: None, name });
            }
        }
    }

    /// The static variable at `vaddr`: its type (an array's element type)
    /// and field. Scalars and untyped symbols are named `TYPE NAME`.
    pub fn static_at(&self, vaddr: u64) -> Option<Typed> {
        let Some(g) = self.global_at(vaddr) else { return self.pointed_at(vaddr).or_else(|| self.got_at(vaddr)) };
        let off = vaddr - g.addr;
        let Some(ty) = g.ty else {
            return Some(Typed {
                type_name: format!("[symbol {}]", g.name),
                field: String::new(),
                field_offset: 0,
                offset: off,
                size: g.size,
            });
        };
        let unit = &self.units[g.unit];
        let (elem, elem_off) = self.element(g.unit, unit, ty, off);
        if self.is_aggregate(unit, elem) {
            Some(self.typed(g.unit, unit, elem, elem_off))
        } else {
            let size = self.size_of(g.unit, unit, elem).max(1);
            let type_name = format!("{} {}", self.name_of(unit, ty), g.name);
            Some(Typed { type_name, field: String::new(), field_offset: 0, offset: elem_off, size })
        }
    }

    /// Whether `vaddr` lies in a writable segment (or in none).
    fn writable(&self, vaddr: u64) -> bool {
        self.loads.iter().find(|l| l.vaddr <= vaddr && vaddr < l.vaddr + l.memsz).is_none_or(|l| l.writable)
    }

    fn global_at(&self, vaddr: u64) -> Option<&Global> {
        let i = self.globals.partition_point(|g| g.addr <= vaddr).checked_sub(1)?;
        let g = &self.globals[i];
        (vaddr - g.addr < g.size).then_some(g)
    }

    /// The typed static holding `vaddr`: its type and the offset into it.
    pub(crate) fn static_raw(&self, vaddr: u64) -> Option<(TypeRef, u64)> {
        let g = self.global_at(vaddr)?;
        Some((TypeRef { ui: g.unit, ty: g.ty? }, vaddr - g.addr))
    }

    /// The type of what register `reg` (DWARF number) points to at `pc`,
    /// and the field at `offset` from it: the variable whose location at
    /// `pc` is that register and whose type is a pointer; or the variable
    /// stored in memory at `reg + k` that covers `offset`.
    pub fn pointee_at(&self, pc: u64, reg: u16, offset: i64) -> Option<Typed> {
        match self.variable_at(pc, reg, offset)? {
            Hit::InReg(v) => {
                let pointee = self.pointee_ref(v)?;
                let size = self.size_of(pointee.ui, &self.units[pointee.ui], pointee.ty).max(1) as i64;
                (offset >= 0).then(|| self.describe(pointee, (offset % size) as u64))
            }
            Hit::InMem(v, off) => self.local(v.ui, &self.units[v.ui], v.ty, off),
        }
    }

    /// The variable held in register `reg` at `pc`, or stored at `reg + k`
    /// around `reg + offset` (innermost function containing `pc` first).
    pub(crate) fn variable_at(&self, pc: u64, reg: u16, offset: i64) -> Option<Hit> {
        let end = self.funcs.partition_point(|f| f.low <= pc);
        for f in self.funcs[..end].iter().rev().filter(|f| pc < f.high) {
            let unit = &self.units[f.unit];
            let frame = self.frame_base(unit, f.die, pc);
            let mut tree = unit.entries_tree(Some(f.die)).ok()?;
            let root = tree.root().ok()?;
            let q = Query { pc, reg, offset, frame };
            if let Some(h) = self.search_subtree(f.unit, unit, root, &q) {
                return Some(h);
            }
        }
        None
    }

    /// A function's frame base at `pc` as (DWARF register, offset): the CFA
    /// from the call frame information, or the register it names.
    fn frame_base(&self, unit: &gimli::Unit<R>, die: UnitOffset, pc: u64) -> Option<(u16, i64)> {
        let e = unit.entry(die).ok()?;
        let AttributeValue::Exprloc(expr) = e.attr_value(gimli::DW_AT_frame_base).ok()?? else { return None };
        match expr.operations(unit.encoding()).next().ok()?? {
            gimli::Operation::CallFrameCFA => self.cfa_at(pc),
            gimli::Operation::Register { register } => Some((register.0, 0)),
            gimli::Operation::RegisterOffset { register, offset, .. } => Some((register.0, offset)),
            _ => None,
        }
    }

    /// The CFA rule at `pc` when it is register + offset.
    pub fn cfa_at(&self, pc: u64) -> Option<(u16, i64)> {
        use gimli::UnwindSection;
        let (eh, bases) = self.eh_frame.as_ref()?;
        let mut ctx = Box::new(gimli::UnwindContext::new());
        let row = eh.unwind_info_for_address(bases, &mut ctx, pc, gimli::EhFrame::cie_from_offset).ok()?;
        match row.cfa() {
            gimli::CfaRule::RegisterAndOffset { register, offset } => Some((register.0, *offset)),
            _ => None,
        }
    }

    /// Depth-first over a scope's variables, parameters, blocks and inlined calls.
    fn search_subtree(&self, ui: usize, unit: &gimli::Unit<R>, node: gimli::EntriesTreeNode<R>, q: &Query) -> Option<Hit> {
        let mut it = node.children();
        let mut nested = Vec::new();
        while let Ok(Some(child)) = it.next() {
            let e = child.entry();
            match e.tag() {
                gimli::DW_TAG_variable | gimli::DW_TAG_formal_parameter => {
                    if let Some(t) = self.match_variable(ui, unit, e, q) {
                        return Some(t);
                    }
                }
                gimli::DW_TAG_lexical_block | gimli::DW_TAG_inlined_subroutine => nested.push(e.offset()),
                _ => {}
            }
        }
        for c in nested {
            let mut t = unit.entries_tree(Some(c)).ok()?;
            let r = t.root().ok()?;
            if let Some(x) = self.search_subtree(ui, unit, r, q) {
                return Some(x);
            }
        }
        None
    }

    fn match_variable(&self, ui: usize, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>, q: &Query) -> Option<Hit> {
        let (reg, offset) = (q.reg, q.offset);
        let expr = self.location_at(unit, e, q.pc)?;
        let mut ops = expr.operations(unit.encoding());
        let first = ops.next().ok()??;
        let only = matches!(ops.next(), Ok(None));
        let ty = TypeRef { ui, ty: self.var_type(unit, e)? };
        match first {
            // The variable's value is in the register (a pointer to the object, when it is one).
            // A `void *` or integer there says nothing: another variable may share the register.
            gimli::Operation::Register { register } if register.0 == reg && only => self.pointee_ref(ty).map(|_| Hit::InReg(ty)),
            // The variable itself lives at register + k (a stack local).
            gimli::Operation::RegisterOffset { register, offset: k, .. } if register.0 == reg && only => {
                self.covers(ty, offset - k).then_some(Hit::InMem(ty, offset - k))
            }
            // At frame base + k, the frame base being register + f at this PC.
            gimli::Operation::FrameOffset { offset: k } if only => match q.frame {
                Some((r, f)) if r == reg => self.covers(ty, offset - f - k).then_some(Hit::InMem(ty, offset - f - k)),
                _ => None,
            },
            _ => None,
        }
    }

    /// A variable's location expression at `pc` (its only one, or the
    /// location list's entry covering `pc`).
    fn location_at(&self, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>, pc: u64) -> Option<gimli::Expression<R>> {
        match e.attr_value(gimli::DW_AT_location).ok()?? {
            AttributeValue::Exprloc(x) => Some(x),
            other => {
                let mut list = self.dwarf.attr_locations(unit, other).ok()??;
                while let Ok(Some(l)) = list.next() {
                    if l.range.begin <= pc && pc < l.range.end {
                        return Some(l.data);
                    }
                }
                None
            }
        }
    }

    fn covers(&self, t: TypeRef, off: i64) -> bool {
        off >= 0 && off < self.size_of(t.ui, &self.units[t.ui], t.ty) as i64
    }

    /// What a pointer-typed `t` points to; `None` for `void *` and non-pointers.
    pub(crate) fn pointee_ref(&self, t: TypeRef) -> Option<TypeRef> {
        let unit = &self.units[t.ui];
        self.pointee(unit, t.ty).map(|ty| TypeRef { ui: t.ui, ty })
    }

    /// Whether `t` (an array's element) is a struct, union or class.
    pub(crate) fn is_aggregate_ref(&self, t: TypeRef) -> bool {
        let unit = &self.units[t.ui];
        let (elem, _) = self.element(t.ui, unit, t.ty, 0);
        self.is_aggregate(unit, elem)
    }

    /// Type and field at `off` inside an object of type `t` (array elements folded).
    pub(crate) fn describe(&self, t: TypeRef, off: u64) -> Typed {
        let unit = &self.units[t.ui];
        let size = self.size_of(t.ui, unit, t.ty).max(1);
        let (elem, eoff) = self.element(t.ui, unit, t.ty, off % size);
        self.typed(t.ui, unit, elem, eoff)
    }

    /// The scalar (or pointer) member that starts exactly at `off` inside
    /// `t`, through nested structs and arrays: what a load there reads.
    pub(crate) fn leaf_at(&self, t: TypeRef, off: u64) -> Option<TypeRef> {
        let unit = &self.units[t.ui];
        let size = self.size_of(t.ui, unit, t.ty).max(1);
        let (mut ty, mut off) = self.element(t.ui, unit, t.ty, off % size);
        for _ in 0..8 {
            if !self.is_aggregate(unit, ty) {
                return (off == 0).then_some(TypeRef { ui: t.ui, ty });
            }
            let (mt, loc) = self
                .members(t.ui, unit, ty)
                .into_iter()
                .find(|&(_, _, loc, sz)| loc <= off && off < loc + sz.max(1))
                .map(|(_, mt, loc, _)| (mt, loc))?;
            let (e, eoff) = self.element(t.ui, unit, mt, off - loc);
            (ty, off) = (e, eoff);
        }
        None
    }

    /// The function starting at `entry`: its DWARF entry.
    fn function_at(&self, entry: u64) -> Option<(usize, UnitOffset)> {
        let i = self.funcs.partition_point(|f| f.low < entry);
        self.funcs[i..].iter().take_while(|f| f.low == entry).next().map(|f| (f.unit, f.die))
    }

    /// A subprogram's attribute, looking through its declaration or abstract origin.
    fn sub_attr(&self, unit: &gimli::Unit<R>, die: UnitOffset, at: gimli::DwAt) -> Option<AttributeValue<R>> {
        let mut d = die;
        for _ in 0..4 {
            let e = unit.entry(d).ok()?;
            if let Some(v) = e.attr_value(at).ok()? {
                return Some(v);
            }
            match e.attr_value(gimli::DW_AT_specification).ok()?.or(e.attr_value(gimli::DW_AT_abstract_origin).ok()?) {
                Some(AttributeValue::UnitRef(o)) => d = o,
                _ => return None,
            }
        }
        None
    }

    /// The pointee type of what the function at `entry` returns.
    pub(crate) fn returns(&self, entry: u64) -> Option<TypeRef> {
        let (ui, die) = self.function_at(entry)?;
        let Some(AttributeValue::UnitRef(ty)) = self.sub_attr(&self.units[ui], die, gimli::DW_AT_type) else { return None };
        self.pointee_ref(TypeRef { ui, ty })
    }

    /// The pointee type of the function's first parameter (`this` for a constructor).
    pub(crate) fn first_param(&self, entry: u64) -> Option<TypeRef> {
        let (ui, die) = self.function_at(entry)?;
        let unit = &self.units[ui];
        let mut tree = unit.entries_tree(Some(die)).ok()?;
        let root = tree.root().ok()?;
        let mut it = root.children();
        while let Ok(Some(c)) = it.next() {
            let e = c.entry();
            if e.tag() == gimli::DW_TAG_formal_parameter {
                let ty = self.var_type(unit, e)?;
                return self.pointee_ref(TypeRef { ui, ty });
            }
        }
        None
    }

    /// Whether the function holding `pc` was written in assembly (its unit's
    /// language says so): DWARF gives it bounds but no variables.
    pub fn in_assembly(&self, pc: u64) -> bool {
        let end = self.funcs.partition_point(|f| f.low <= pc);
        let Some(f) = self.funcs[..end].iter().rev().find(|f| pc < f.high) else { return false };
        let unit = &self.units[f.unit];
        let lang = unit.entries().next_dfs().ok().flatten().and_then(|(_, e)| e.attr_value(gimli::DW_AT_language).ok().flatten());
        matches!(lang, Some(AttributeValue::Language(gimli::DW_LANG_Mips_Assembler)))
    }

    /// Entry and end of the outermost function holding `pc`.
    pub(crate) fn function_bounds(&self, pc: u64) -> Option<(u64, u64)> {
        let end = self.funcs.partition_point(|f| f.low <= pc);
        self.funcs[..end].iter().filter(|f| pc < f.high).map(|f| (f.low, f.high)).max_by_key(|&(l, h)| h - l)
    }

    /// The file's bytes at ELF virtual addresses `[low, high)`.
    pub(crate) fn code(&self, low: u64, high: u64) -> Option<&'static [u8]> {
        let l = self.loads.iter().find(|l| l.vaddr <= low && high <= l.vaddr + l.filesz)?;
        let start = (low - l.vaddr + l.offset) as usize;
        self.data.get(start..start + (high - low) as usize)
    }

    /// Members of a struct/union/class: (name, type, offset, size). Bit-fields
    /// are placed at the bytes their bits occupy.
    fn members(&self, ui: usize, unit: &gimli::Unit<R>, t: UnitOffset) -> Vec<(String, UnitOffset, u64, u64)> {
        let s = self.strip(unit, t);
        let mut out = Vec::new();
        let Ok(mut tree) = unit.entries_tree(Some(s)) else { return out };
        let Ok(root) = tree.root() else { return out };
        let mut it = root.children();
        while let Ok(Some(child)) = it.next() {
            let m = child.entry();
            if m.tag() != gimli::DW_TAG_member && m.tag() != gimli::DW_TAG_inheritance {
                continue;
            }
            let Some(AttributeValue::UnitRef(mt)) = m.attr_value(gimli::DW_AT_type).ok().flatten() else { continue };
            let attr = |a| m.attr_value(a).ok().flatten().and_then(|v: AttributeValue<R>| v.udata_value());
            let (loc, size) = match (attr(gimli::DW_AT_bit_size), attr(gimli::DW_AT_data_bit_offset)) {
                (Some(bits), Some(at)) => (at / 8, (at + bits).div_ceil(8) - at / 8),
                (Some(bits), None) => (attr(gimli::DW_AT_data_member_location).unwrap_or(0), bits.div_ceil(8)),
                _ => (attr(gimli::DW_AT_data_member_location).unwrap_or(0), self.size_of(ui, unit, mt)),
            };
            let name = if m.tag() == gimli::DW_TAG_inheritance {
                self.name_of(unit, mt)
            } else {
                self.name_str(unit, m.offset()).unwrap_or_else(|| "<anonymous>".into())
            };
            out.push((name, mt, loc, size));
        }
        out
    }

    /// A variable of type `ty` stored in memory, accessed at `off` from its start.
    fn local(&self, ui: usize, unit: &gimli::Unit<R>, ty: UnitOffset, off: i64) -> Option<Typed> {
        let size = self.size_of(ui, unit, ty) as i64;
        if off < 0 || off >= size {
            return None;
        }
        let (elem, elem_off) = self.element(ui, unit, ty, off as u64);
        Some(self.typed(ui, unit, elem, elem_off))
    }

    /// A variable's type, through DW_AT_abstract_origin for inlined copies.
    fn var_type(&self, unit: &gimli::Unit<R>, e: &gimli::DebuggingInformationEntry<R>) -> Option<UnitOffset> {
        match e.attr_value(gimli::DW_AT_type).ok()? {
            Some(AttributeValue::UnitRef(o)) => Some(o),
            _ => match e.attr_value(gimli::DW_AT_abstract_origin).ok()? {
                Some(AttributeValue::UnitRef(o)) => {
                    let origin = unit.entry(o).ok()?;
                    self.var_type(unit, &origin)
                }
                _ => None,
            },
        }
    }

    fn type_ref(unit: &gimli::Unit<R>, t: UnitOffset) -> Option<UnitOffset> {
        match unit.entry(t).ok()?.attr_value(gimli::DW_AT_type).ok()? {
            Some(AttributeValue::UnitRef(o)) => Some(o),
            _ => None,
        }
    }

    fn tag(unit: &gimli::Unit<R>, t: UnitOffset) -> Option<gimli::DwTag> {
        unit.entry(t).ok().map(|e| e.tag())
    }

    /// Through typedefs and qualifiers.
    fn strip(&self, unit: &gimli::Unit<R>, mut t: UnitOffset) -> UnitOffset {
        for _ in 0..16 {
            match Self::tag(unit, t) {
                Some(
                    gimli::DW_TAG_typedef
                    | gimli::DW_TAG_const_type
                    | gimli::DW_TAG_volatile_type
                    | gimli::DW_TAG_restrict_type
                    | gimli::DW_TAG_atomic_type,
                ) => match Self::type_ref(unit, t) {
                    Some(n) => t = n,
                    None => return t,
                },
                _ => return t,
            }
        }
        t
    }

    /// Through qualifiers only (a typedef names the type as written).
    fn unqualify(&self, unit: &gimli::Unit<R>, mut t: UnitOffset) -> UnitOffset {
        while let Some(gimli::DW_TAG_const_type | gimli::DW_TAG_volatile_type | gimli::DW_TAG_restrict_type | gimli::DW_TAG_atomic_type) =
            Self::tag(unit, t)
        {
            match Self::type_ref(unit, t) {
                Some(n) => t = n,
                None => break,
            }
        }
        t
    }

    fn pointee(&self, unit: &gimli::Unit<R>, t: UnitOffset) -> Option<UnitOffset> {
        let s = self.strip(unit, t);
        match Self::tag(unit, s)? {
            gimli::DW_TAG_pointer_type | gimli::DW_TAG_reference_type | gimli::DW_TAG_rvalue_reference_type => {
                Self::type_ref(unit, s).map(|p| self.unqualify(unit, p))
            }
            _ => None,
        }
    }

    fn is_aggregate(&self, unit: &gimli::Unit<R>, t: UnitOffset) -> bool {
        matches!(
            Self::tag(unit, self.strip(unit, t)),
            Some(gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type)
        )
    }

    /// For arrays (possibly nested): the element type and the offset in it.
    fn element(&self, ui: usize, unit: &gimli::Unit<R>, t: UnitOffset, off: u64) -> (UnitOffset, u64) {
        let mut t = self.unqualify(unit, t);
        let mut off = off;
        for _ in 0..8 {
            let s = self.strip(unit, t);
            if Self::tag(unit, s) != Some(gimli::DW_TAG_array_type) {
                break;
            }
            let Some(elem) = Self::type_ref(unit, s) else { break };
            let esize = self.size_of(ui, unit, elem).max(1);
            off %= esize;
            t = self.unqualify(unit, elem);
        }
        (t, off)
    }

    fn typed(&self, ui: usize, unit: &gimli::Unit<R>, t: UnitOffset, off: u64) -> Typed {
        let (field, field_offset) = self.field_at(ui, unit, t, off, 0);
        Typed { type_name: self.name_of(unit, t), field, field_offset, offset: off, size: self.size_of(ui, unit, t) }
    }

    fn name_str(&self, unit: &gimli::Unit<R>, t: UnitOffset) -> Option<String> {
        let e = unit.entry(t).ok()?;
        let v = e.attr_value(gimli::DW_AT_name).ok()??;
        Some(self.dwarf.attr_string(unit, v).ok()?.to_string_lossy().into_owned())
    }

    /// The type as the source writes it.
    pub(crate) fn name_of(&self, unit: &gimli::Unit<R>, t: UnitOffset) -> String {
        let t = self.unqualify(unit, t);
        let name = self.name_str(unit, t);
        match Self::tag(unit, t) {
            Some(gimli::DW_TAG_structure_type) => format!("struct {}", name.as_deref().unwrap_or("<anonymous>")),
            Some(gimli::DW_TAG_union_type) => format!("union {}", name.as_deref().unwrap_or("<anonymous>")),
            Some(gimli::DW_TAG_class_type) => format!("class {}", name.as_deref().unwrap_or("<anonymous>")),
            Some(gimli::DW_TAG_enumeration_type) => format!("enum {}", name.as_deref().unwrap_or("<anonymous>")),
            Some(gimli::DW_TAG_pointer_type) => match Self::type_ref(unit, t) {
                Some(p) => format!("{} *", self.name_of(unit, p)),
                None => "void *".into(),
            },
            Some(gimli::DW_TAG_array_type) => match Self::type_ref(unit, t) {
                Some(p) => format!("{} []", self.name_of(unit, p)),
                None => "[]".into(),
            },
            _ => name.unwrap_or_else(|| "?".into()),
        }
    }

    /// The member path at `off` and where its innermost member starts (of
    /// the first candidate; array elements folded to the first); where
    /// several members cover it (a union, bit-fields sharing a byte) every
    /// candidate, joined by `|`.
    fn field_at(&self, ui: usize, unit: &gimli::Unit<R>, t: UnitOffset, off: u64, depth: u32) -> (String, u64) {
        let s = self.strip(unit, t);
        if depth > 6 || !self.is_aggregate(unit, s) {
            return (String::new(), 0);
        }
        let mut start = None;
        let paths: Vec<String> = self
            .members(ui, unit, s)
            .into_iter()
            .filter(|&(_, _, loc, size)| loc <= off && off < loc + size.max(1))
            .map(|(name, mt, loc, _)| {
                let (elem, eoff) = self.element(ui, unit, mt, off - loc);
                let (inner, inner_start) = self.field_at(ui, unit, elem, eoff, depth + 1);
                start.get_or_insert(loc + inner_start);
                if inner.is_empty() {
                    name
                } else if name == "<anonymous>" {
                    inner
                } else {
                    format!("{name}.{inner}")
                }
            })
            .collect();
        (paths.join("|"), start.unwrap_or(0))
    }

    fn size_of(&self, ui: usize, unit: &gimli::Unit<R>, t: UnitOffset) -> u64 {
        let _ = ui;
        let mut t = t;
        for _ in 0..16 {
            let Ok(e) = unit.entry(t) else { return 0 };
            if let Some(n) = e.attr_value(gimli::DW_AT_byte_size).ok().flatten().and_then(|v| v.udata_value()) {
                return n;
            }
            match e.tag() {
                gimli::DW_TAG_pointer_type | gimli::DW_TAG_reference_type | gimli::DW_TAG_rvalue_reference_type => return 8,
                gimli::DW_TAG_array_type => {
                    let Some(elem) = Self::type_ref(unit, t) else { return 0 };
                    return self.size_of(ui, unit, elem) * self.array_count(unit, t);
                }
                _ => match Self::type_ref(unit, t) {
                    Some(n) => t = n,
                    None => return 0,
                },
            }
        }
        0
    }

    fn array_count(&self, unit: &gimli::Unit<R>, t: UnitOffset) -> u64 {
        let Ok(mut tree) = unit.entries_tree(Some(t)) else { return 0 };
        let Ok(root) = tree.root() else { return 0 };
        let mut it = root.children();
        let mut count = 1u64;
        let mut any = false;
        while let Ok(Some(child)) = it.next() {
            let e = child.entry();
            if e.tag() != gimli::DW_TAG_subrange_type {
                continue;
            }
            let n = match e.attr_value(gimli::DW_AT_count).ok().flatten().and_then(|v| v.udata_value()) {
                Some(n) => n,
                None => e.attr_value(gimli::DW_AT_upper_bound).ok().flatten().and_then(|v| v.udata_value()).map_or(0, |u| u + 1),
            };
            count = count.saturating_mul(n);
            any = true;
        }
        if any {
            count
        } else {
            0
        }
    }
}

/// Test support: a C source built with `cc`, its types and its functions' instructions.
#[cfg(test)]
pub(crate) mod built {
    use super::ImageTypes;
    use iced_x86::{Decoder, DecoderOptions, Instruction};
    use object::{Object, ObjectSymbol};
    use std::collections::HashMap;

    /// The build: its folder (removed on drop), types and symbols (address, size).
    pub(crate) struct Built {
        _dir: tempfile::TempDir,
        pub types: ImageTypes,
        pub symbols: HashMap<String, (u64, u64)>,
    }

    /// `source` built with `cc FLAGS -g` (a `-shared` one as a library).
    pub(crate) fn c(source: &str, flags: &[&str]) -> Built {
        let dir = tempfile::tempdir().unwrap();
        let (src, out) = (dir.path().join("t.c"), dir.path().join(if flags.contains(&"-shared") { "libt.so" } else { "t" }));
        std::fs::write(&src, source).unwrap();
        let st = std::process::Command::new("cc").args(flags).args(["-g", "-o"]).arg(&out).arg(&src).status().expect("cc");
        assert!(st.success(), "cc {flags:?}");
        let data = std::fs::read(&out).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let symbols = file.symbols().filter_map(|s| Some((s.name().ok()?.to_string(), (s.address(), s.size())))).collect();
        Built { types: ImageTypes::load(&out).unwrap(), symbols, _dir: dir }
    }

    impl Built {
        /// The instructions of function `name`.
        pub(crate) fn function(&self, name: &str) -> Vec<Instruction> {
            let (addr, size) = self.symbols[name];
            Decoder::with_ip(64, self.types.code(addr, addr + size).unwrap(), addr, DecoderOptions::NONE).into_iter().collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"
struct pair { long a; long b; };
typedef struct node { int key; struct node *next; } Node;
struct pair pairs[4];
long counter;
__attribute__((noinline)) int get(Node *n) { return n->next->key; }
int main(void) { return (int)(pairs[1].b + counter) + get(0); }
"#;

    /// Builds SOURCE with `cc -O2 -g`; returns the binary and its symbols' addresses.
    fn build() -> (tempfile::TempDir, std::path::PathBuf, std::collections::HashMap<String, u64>) {
        let dir = tempfile::tempdir().unwrap();
        let (src, bin) = (dir.path().join("t.c"), dir.path().join("t"));
        std::fs::write(&src, SOURCE).unwrap();
        let st = std::process::Command::new("cc").args(["-O2", "-g", "-o"]).arg(&bin).arg(&src).status().expect("cc");
        assert!(st.success());
        let data = std::fs::read(&bin).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let syms = file.symbols().filter_map(|s| Some((s.name().ok()?.to_string(), s.address()))).collect();
        (dir, bin, syms)
    }

    #[test]
    fn statics_get_their_type_and_field_by_offset() {
        // Checks pairs[1].b (pairs + 16 + 8) is struct pair field b at offset 8 (the field starting there too), and a scalar static is named by type and variable.
        let (_d, bin, syms) = build();
        let t = ImageTypes::load(&bin).unwrap();
        let got = t.static_at(syms["pairs"] + 24).unwrap();
        assert_eq!((got.type_name.as_str(), got.field.as_str(), got.offset, got.field_offset, got.size), ("struct pair", "b", 8, 8, 16));
        assert_eq!(t.static_at(syms["counter"]).unwrap().type_name, "long int counter");
        assert_eq!(t.static_at(syms["pairs"] + 64), None);
    }

    #[test]
    fn bss_sharing_the_data_segments_last_page_maps_back_to_its_vaddr() {
        // Checks a .bss static (past the data segment's file size, in its file-backed last page) gets its ELF address back from its file offset.
        let (_d, bin, syms) = build();
        let t = ImageTypes::load(&bin).unwrap();
        let c = syms["counter"];
        let l = t.loads.iter().find(|l| l.vaddr <= c && c < l.vaddr + l.memsz).unwrap();
        assert!(c >= l.vaddr + l.filesz, "counter is in .bss");
        assert_eq!(t.vaddr_of(l.offset + (c - l.vaddr)), Some(c));
    }

    #[test]
    fn a_stripped_c_library_takes_its_dwarf_from_the_debug_package() {
        // Checks the C library this test runs on (stripped; libc6-dbg installed by scripts/setup.sh) gets DWARF by build-id, with malloc a function of it.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| p.contains("/libc.so")).expect("libc mapped");
        let data = std::fs::read(libc).unwrap();
        let file = object::File::parse(&*data).unwrap();
        assert!(file.section_by_name(".debug_info").is_none(), "{libc} is not stripped: nothing to check");
        let malloc = file.dynamic_symbols().find(|s| s.name() == Ok("malloc")).unwrap().address();
        let t = ImageTypes::load(Path::new(libc)).unwrap();
        assert!(t.has_dwarf, "no DWARF for {libc}: is libc6-dbg installed?");
        assert!(t.function_bounds(malloc).is_some_and(|(lo, hi)| lo <= malloc && malloc < hi));
    }

    #[test]
    fn functions_of_an_assembly_unit_are_known_as_such() {
        // Checks that with a `.S` file built -g beside C (as glibc's string routines are), its function is in assembly and main is not.
        let dir = tempfile::tempdir().unwrap();
        let (c, s, bin) = (dir.path().join("m.c"), dir.path().join("copy.S"), dir.path().join("t"));
        std::fs::write(&c, "void copy8(long *d, const long *s);\nint main(void) { long a = 1, b; copy8(&b, &a); return (int)b - 1; }\n")
            .unwrap();
        std::fs::write(
            &s,
            ".globl copy8\n.type copy8,@function\ncopy8:\n  mov (%rsi), %rax\n  mov %rax, (%rdi)\n  ret\n.size copy8,.-copy8\n",
        )
        .unwrap();
        let st = std::process::Command::new("cc").args(["-O2", "-g", "-o"]).arg(&bin).arg(&c).arg(&s).status().expect("cc");
        assert!(st.success());
        let data = std::fs::read(&bin).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let addr = |n: &str| file.symbols().find(|x| x.name() == Ok(n)).unwrap().address();
        let t = ImageTypes::load(&bin).unwrap();
        assert!(t.in_assembly(addr("copy8")));
        assert!(!t.in_assembly(addr("main")));
    }

    #[test]
    fn the_base_registers_pointer_variable_gives_the_pointee_type() {
        // Checks that at get's first instruction rdi (DWARF 5) holds `Node *n`: offset 8 is Node.next; another register gives nothing.
        let (_d, bin, syms) = build();
        let t = ImageTypes::load(&bin).unwrap();
        let got = t.pointee_at(syms["get"], 5, 8).unwrap();
        assert_eq!((got.type_name.as_str(), got.field.as_str()), ("Node", "next"));
        assert_eq!(t.pointee_at(syms["get"], 5, 0).unwrap().field, "key");
        assert_eq!(t.pointee_at(syms["get"], 3, 8), None);
    }
}
