//! Each access sample's address to a data type and field (DProf §4.2):
//! (a) statics from the image's DWARF or symbols, (c) the type of the
//! pointer the instruction dereferences (DWARF location of its base
//! register at that instruction), (b) heap blocks from the allocation log,
//! grouped by allocation site when no type is found — never dropped.
//! Loading images and maps is IO; [`infer_site_types`] is pure.

use crate::log::{self, AccessRecord};
use crate::maps::{self, Mapping, Region};
use crate::types::{AllocType, ImageTypes, TypeRef, Typed, Unknown};
use std::collections::HashMap;
use std::path::Path;

/// How a sample's type was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum How {
    /// A static variable's DWARF type (or its ELF symbol).
    Static,
    /// The heap block's type from where its allocation's pointer went.
    Alloc,
    /// The DWARF type of the variable in the base register at the instruction.
    Register,
    /// The base register's type by type flow through the function's code.
    Flow,
    /// A slot of the function's own frame a push, pop, call or return
    /// touches: a saved register or the return address.
    Frame,
    /// The type other samples found for the same heap block.
    Block,
    /// The type other samples found for objects from the same allocation site.
    Site,
    /// No type: grouped by allocation site.
    SiteOnly,
    /// No type and no allocation: grouped by memory region.
    Region,
}

impl How {
    pub fn typed(self) -> bool {
        matches!(self, How::Static | How::Alloc | How::Register | How::Flow | How::Frame | How::Block | How::Site)
    }
}

/// A heap block holding an address, as the allocation log tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeapBlock {
    pub base: u64,
    pub size: u64,
    /// The allocation site, named (`make_node (list.c:42)`).
    pub site: String,
    /// The image and file offset of the allocator call's return address.
    pub site_at: Option<(String, u64)>,
    /// The return addresses above the site (innermost first) as image and
    /// file offset, where the allocation log kept them; `None` for one
    /// outside any image.
    pub callers_at: Vec<Option<(String, u64)>>,
}

/// Where the sampled address lies, for the coverage line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Area {
    Static,
    Stack,
    Heap,
    Other,
}

/// The allocation index as the resolver needs it (the `objects` crate's
/// `AllocationIndex` in practice).
pub trait Heap {
    fn block(&mut self, pid: u32, addr: u64, time_ns: u64) -> Option<HeapBlock>;
}

/// No allocation log.
pub struct NoHeap;

impl Heap for NoHeap {
    fn block(&mut self, _: u32, _: u64, _: u64) -> Option<HeapBlock> {
        None
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub type_name: String,
    pub field: String,
    /// Where the field starts in its type (0 without a field).
    pub field_offset: u64,
    pub how: How,
    /// Start and size of the object (or array element) the address is in, when known.
    pub object: Option<(u64, u64)>,
    /// Offset inside the object.
    pub offset: u64,
    pub site: Option<String>,
    pub area: Area,
    /// Why no type was found (untyped samples).
    pub why: Option<Unknown>,
    /// A scalar type the block's allocation was stored as (an allocator's
    /// own header pointer, `long *`): used only when nothing better is found.
    pub fallback: Option<(String, String, u64)>,
}

/// A base register's type and how it was found, or why not.
type RegisterType = Result<(Typed, How), Unknown>;

pub struct Resolver<H: Heap> {
    maps: HashMap<u32, std::rc::Rc<Vec<Mapping>>>,
    /// Image path -> index in `images` (caches key on the index: no path copies per sample).
    paths: HashMap<String, usize>,
    images: Vec<(String, Option<ImageTypes>)>,
    heap: H,
    /// (image, vaddr of instruction, register, offset) -> result of (c).
    pointee_cache: HashMap<(usize, u64, u16, i64), RegisterType>,
    /// (image, vaddr) -> the static there.
    static_cache: HashMap<(usize, u64), Option<Typed>>,
    /// (image, block type, offset) -> its field.
    field_cache: HashMap<(usize, TypeRef, u64), Typed>,
    /// (image, file offset of the return address) -> the block type from the allocation site.
    alloc_cache: HashMap<(usize, u64), AllocType>,
}

impl<H: Heap> Resolver<H> {
    /// Reads the process maps saved with the access log.
    pub fn new(db: &Path, heap: H) -> Resolver<H> {
        let mut maps = HashMap::new();
        if let Ok(dir) = std::fs::read_dir(log::data_dir(db).join("maps")) {
            for e in dir.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
                if let Ok(text) = std::fs::read_to_string(e.path()) {
                    maps.insert(pid, std::rc::Rc::new(maps::parse(&text)));
                }
            }
        }
        Resolver {
            maps,
            paths: HashMap::new(),
            images: Vec::new(),
            heap,
            pointee_cache: HashMap::new(),
            static_cache: HashMap::new(),
            field_cache: HashMap::new(),
            alloc_cache: HashMap::new(),
        }
    }

    /// The allocation index it was given.
    pub fn heap(&self) -> &H {
        &self.heap
    }

    /// Images whose DWARF or symbols could not be read: (path, why).
    pub fn unreadable(&self) -> Vec<String> {
        self.images.iter().filter(|(_, v)| v.is_none()).map(|(k, _)| k.clone()).collect()
    }

    /// The path of the image file mapped at `addr` in process `pid`, as its
    /// saved maps tell.
    pub fn image_path(&self, pid: u32, addr: u64) -> Option<&str> {
        match maps::region(self.maps.get(&pid)?, addr) {
            Region::Image { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The image's index, loading it on first use.
    fn image_index(&mut self, path: &str) -> usize {
        if let Some(&i) = self.paths.get(path) {
            return i;
        }
        self.images.push((path.to_string(), ImageTypes::load(Path::new(path)).ok()));
        self.paths.insert(path.to_string(), self.images.len() - 1);
        self.images.len() - 1
    }

    pub fn resolve(&mut self, r: &AccessRecord) -> Resolved {
        let maps = self.maps.get(&r.pid).cloned().unwrap_or_default();
        let region = maps::region(&maps, r.addr);
        if let Some(t) = self.static_at(&region, r.addr).or_else(|| self.literal(&maps, &region, r)) {
            let object = Some((r.addr - t.offset, t.size));
            let (offset, how) = (t.offset, How::Static);
            return Resolved {
                type_name: t.type_name,
                field: t.field,
                field_offset: t.field_offset,
                how,
                object,
                offset,
                site: None,
                area: Area::Static,
                why: None,
                fallback: None,
            };
        }
        let area = match region {
            Region::Stack => Area::Stack,
            Region::Heap | Region::Anon => Area::Heap,
            _ => Area::Other,
        };
        let block = self.heap.block(r.pid, r.addr, r.time);
        let area = if block.is_some() { Area::Heap } else { area };
        let alloc = block.as_ref().map(|b| self.alloc_typed(b, r.addr));
        if let (Some(Ok((t, true, false))), Some(b)) = (&alloc, &block) {
            let object = Some((b.base, b.size));
            let (type_name, field, offset) = (t.type_name.clone(), t.field.clone(), r.addr - b.base);
            return Resolved {
                type_name,
                field,
                field_offset: t.field_offset,
                how: How::Alloc,
                object,
                offset,
                site: Some(b.site.clone()),
                area,
                why: None,
                fallback: None,
            };
        }
        let fallback = match &alloc {
            Some(Ok((t, _, _))) => Some((t.type_name.clone(), t.field.clone(), t.field_offset)),
            _ => None,
        };
        let reg = self.pointee(&maps, r);
        if let Ok((t, how)) = reg {
            // A frame slot is on a stack, whichever mapping holds that stack (threads' are anonymous).
            let area = if how == How::Frame { Area::Stack } else { area };
            let object = block.as_ref().map(|b| (b.base, b.size)).or(Some((r.addr - t.offset, t.size)));
            let site = block.map(|b| b.site);
            return Resolved {
                type_name: t.type_name,
                field: t.field,
                field_offset: t.field_offset,
                how,
                object,
                offset: t.offset,
                site,
                area,
                why: None,
                fallback: None,
            };
        }
        // The allocation's reason names the heap block's miss better than the register's.
        let why = match alloc {
            Some(Err(w)) => Some(w),
            Some(Ok(_)) => Some(Unknown::UntypedRegister),
            _ => reg.err(),
        };
        if let Some(b) = block {
            let offset = r.addr - b.base;
            return Resolved {
                type_name: format!("[heap from {}]", b.site),
                field: String::new(),
                field_offset: 0,
                how: How::SiteOnly,
                object: Some((b.base, b.size)),
                offset,
                site: Some(b.site),
                area,
                why,
                fallback,
            };
        }
        let name = match region {
            Region::Heap => "[heap]".to_string(),
            Region::Stack => "[stack]".to_string(),
            Region::Anon => "[anonymous memory]".to_string(),
            Region::Unmapped => "[unmapped]".to_string(),
            Region::Image { path, .. } | Region::Bss { path, .. } => format!("[data of {}]", path.rsplit('/').next().unwrap_or(path)),
        };
        let field = String::new();
        Resolved {
            type_name: name,
            field,
            field_offset: 0,
            how: How::Region,
            object: None,
            offset: 0,
            site: None,
            area,
            why,
            fallback: None,
        }
    }

    /// The block's type from its allocation site, and what `addr` is in it;
    /// true when the type is an aggregate whose size fits the block's (a
    /// scalar may be an allocator's own view; an odd size, an arena's first object).
    /// A site in a `void *` wrapper passes the question to the wrapper's
    /// caller, up the stack the allocation log kept, until a typed
    /// destination; true then in the third place. (A caller may view the
    /// block as a common header — Lua's `GCObject *` — so such a type
    /// yields to the types the block's samples find.)
    fn alloc_typed(&mut self, b: &HeapBlock, addr: u64) -> Result<(Typed, bool, bool), Unknown> {
        let (path, off) = b.site_at.as_ref().ok_or(Unknown::NoDebugInfo)?;
        let (mut i, mut t) = self.site_type(path, *off);
        let mut wrapped = false;
        for up in &b.callers_at {
            match (t, up) {
                (Err(Unknown::Wrapper), Some((path, off))) => {
                    (i, t) = self.site_type(path, *off);
                    wrapped = true;
                }
                _ => break,
            }
        }
        let t: TypeRef = t?;
        let img = self.images[i].1.as_ref().ok_or(Unknown::NoDebugInfo)?;
        let rel = addr - b.base;
        let typed = self.field_cache.entry((i, t, rel)).or_insert_with(|| img.describe(t, rel)).clone();
        // One object (with a flexible tail) or an array of them; a block of any other size holds more (an arena, a workspace).
        let n = typed.size.max(1);
        let fits = (n <= b.size && b.size < 2 * n) || b.size.is_multiple_of(n);
        Ok((typed, fits && img.is_aggregate_ref(t), wrapped))
    }

    /// The type of the block an allocator call returning to this file
    /// offset made (memoized), with the image's index.
    fn site_type(&mut self, path: &str, off: u64) -> (usize, AllocType) {
        let i = self.image_index(path);
        if let Some(t) = self.alloc_cache.get(&(i, off)) {
            return (i, *t);
        }
        let t = match &self.images[i].1 {
            Some(img) => img.vaddr_of(off).ok_or(Unknown::NoCode).and_then(|v| img.alloc_type(v)),
            None => Err(Unknown::NoDebugInfo),
        };
        self.alloc_cache.insert((i, off), t);
        (i, t)
    }

    fn static_at(&mut self, region: &Region, addr: u64) -> Option<Typed> {
        let (i, vaddr) = match region {
            Region::Image { path, file_offset } => {
                let i = self.image_index(path);
                (i, self.images[i].1.as_ref()?.vaddr_of(*file_offset)?)
            }
            Region::Bss { path, last, .. } => {
                let i = self.image_index(path);
                (i, self.images[i].1.as_ref()?.vaddr_of(last.pgoff)? + (addr - last.start))
            }
            _ => return None,
        };
        let img = self.images[i].1.as_ref()?;
        self.static_cache.entry((i, vaddr)).or_insert_with(|| img.static_at(vaddr)).clone()
    }

    /// A floating-point literal of the instruction's own image that it reads
    /// by a RIP-relative operand (no base register, no static there).
    fn literal(&mut self, maps: &[Mapping], region: &Region, r: &AccessRecord) -> Option<Typed> {
        let Region::Image { path, file_offset } = region else { return None };
        let Region::Image { path: code, file_offset: code_offset } = maps::region(maps, r.insn()) else { return None };
        if code != *path {
            return None;
        }
        let i = self.image_index(path);
        let img = self.images[i].1.as_ref()?;
        img.literal_at(img.vaddr_of(code_offset)?, img.vaddr_of(*file_offset)?)
    }

    /// The base register's type at the instruction: the DWARF variable in
    /// it, else type flow through the function.
    fn pointee(&mut self, maps: &[Mapping], r: &AccessRecord) -> RegisterType {
        let reg = r.base.ok_or(Unknown::NoBaseRegister)?;
        let Region::Image { path, file_offset } = maps::region(maps, r.insn()) else { return Err(Unknown::NoDebugInfo) };
        let i = self.image_index(path);
        let key = (i, file_offset, reg, r.base_offset);
        if let Some(c) = self.pointee_cache.get(&key) {
            return c.clone();
        }
        let found = match &self.images[i].1 {
            None => Err(Unknown::NoDebugInfo),
            Some(t) => match t.vaddr_of(file_offset) {
                None if !t.has_dwarf => Err(Unknown::NoDebugInfo),
                None => Err(Unknown::NoCode),
                Some(pc) => match t.frame_slot(pc, reg, r.base_offset).or_else(|| t.canary_at(pc, reg, r.base_offset)) {
                    Some(x) => Ok((x, How::Frame)),
                    None if !t.has_dwarf => Err(Unknown::NoDebugInfo),
                    None => match t.pointee_at(pc, reg, r.base_offset).or_else(|| t.slot_owner(pc, reg, r.base_offset)) {
                        Some(x) => Ok((x, How::Register)),
                        None => match t.spill_at(pc, reg, r.base_offset) {
                            Some(x) => Ok((x, How::Flow)),
                            None => match t.flow_pointee(pc, reg, r.base_offset) {
                                Err(Unknown::UntypedRegister) if t.in_assembly(pc) => Err(Unknown::Assembly),
                                x => x.map(|x| (x, How::Flow)),
                            },
                        },
                    },
                },
            },
        };
        self.pointee_cache.insert(key, found.clone());
        found
    }
}

/// Heap samples with no type of their own take the type other samples
/// found for the same block (it was typed once: every access to it is of
/// that type), else for blocks of the same allocation site.
pub fn infer_site_types(rs: &mut [Resolved]) {
    infer_block_types(rs);
    infer_by_site(rs);
    for r in rs.iter_mut().filter(|r| r.how == How::SiteOnly) {
        if let Some((t, f, fo)) = r.fallback.take() {
            (r.type_name, r.field, r.field_offset, r.how, r.why) = (t, f, fo, How::Alloc, None);
        }
    }
}

/// The block's type from its typed samples (the most common), with the field they saw at each offset.
fn infer_block_types(rs: &mut [Resolved]) {
    type Key = ((u64, u64), String);
    let mut by_block: HashMap<(u64, u64), HashMap<String, usize>> = HashMap::new();
    let mut fields: HashMap<(Key, u64), (String, u64)> = HashMap::new();
    for r in rs.iter().filter(|r| matches!(r.how, How::Register | How::Flow) && r.site.is_some()) {
        let Some(obj) = r.object else { continue };
        *by_block.entry(obj).or_default().entry(r.type_name.clone()).or_default() += 1;
        fields.insert(((obj, r.type_name.clone()), r.offset), (r.field.clone(), r.field_offset));
    }
    for r in rs.iter_mut().filter(|r| r.how == How::SiteOnly) {
        let Some(counts) = r.object.and_then(|o| by_block.get(&o)) else { continue };
        let Some((t, _)) = counts.iter().max_by_key(|&(t, n)| (*n, std::cmp::Reverse(t.clone()))) else { continue };
        let obj = r.object.unwrap_or_default();
        (r.field, r.field_offset) = fields.get(&((obj, t.clone()), r.offset)).cloned().unwrap_or_default();
        r.type_name = t.clone();
        r.how = How::Block;
        r.why = None;
    }
}

fn infer_by_site(rs: &mut [Resolved]) {
    let mut by_site: HashMap<&str, HashMap<&str, usize>> = HashMap::new();
    let mut fields: HashMap<(String, String, u64), (String, u64)> = HashMap::new();
    for r in rs.iter().filter(|r| matches!(r.how, How::Register | How::Flow)) {
        if let Some(s) = &r.site {
            *by_site.entry(s.as_str()).or_default().entry(r.type_name.as_str()).or_default() += 1;
            fields.insert((s.clone(), r.type_name.clone(), r.offset), (r.field.clone(), r.field_offset));
        }
    }
    let best: HashMap<String, String> = by_site
        .into_iter()
        .filter_map(|(s, counts)| Some((s.to_string(), counts.into_iter().max_by_key(|&(t, n)| (n, std::cmp::Reverse(t)))?.0.to_string())))
        .collect();
    for r in rs.iter_mut().filter(|r| r.how == How::SiteOnly) {
        let Some(site) = &r.site else { continue };
        if let Some(t) = best.get(site) {
            (r.field, r.field_offset) = fields.get(&(site.clone(), t.clone(), r.offset)).cloned().unwrap_or_default();
            r.type_name = t.clone();
            r.how = How::Site;
            r.why = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(t: &str, how: How, site: Option<&str>, offset: u64, field: &str) -> Resolved {
        Resolved {
            type_name: t.into(),
            field: field.into(),
            field_offset: if field.is_empty() { 0 } else { offset },
            how,
            object: None,
            offset,
            site: site.map(String::from),
            area: Area::Heap,
            why: None,
            fallback: None,
        }
    }

    #[test]
    fn image_path_names_the_file_mapped_at_an_address_per_process() {
        // Checks image_path reads the maps saved for each pid: code of the program and of a preloaded library are named by their files; the heap, a pid without maps and an unmapped address are no image.
        let db = tempfile::tempdir().unwrap();
        let dir = log::data_dir(db.path()).join("maps");
        std::fs::create_dir_all(&dir).unwrap();
        let maps = "\
555555554000-555555556000 r-xp 00000000 08:01 1 /usr/bin/prog
555555559000-55555557a000 rw-p 00000000 00:00 0                          [heap]
7ffff7a00000-7ffff7a02000 r-xp 00001000 08:01 2 /db/allocs/libloupe_alloc.so
";
        std::fs::write(dir.join("42"), maps).unwrap();
        let r = Resolver::new(db.path(), NoHeap);
        assert_eq!(r.image_path(42, 0x555555555010), Some("/usr/bin/prog"));
        assert_eq!(r.image_path(42, 0x7ffff7a01000), Some("/db/allocs/libloupe_alloc.so"));
        assert_eq!(r.image_path(42, 0x555555560000), None);
        assert_eq!(r.image_path(43, 0x555555555010), None);
        assert_eq!(r.image_path(42, 0x1000), None);
    }

    #[test]
    fn a_scalar_allocation_type_is_only_a_last_resort() {
        // Checks a block stored as `long *` (an allocator's header) yields to its site's register-found type, and is used where nothing else is.
        let weak = |site: &str| Resolved {
            fallback: Some(("long int".into(), String::new(), 0)),
            ..res("[heap from x]", How::SiteOnly, Some(site), 8, "")
        };
        let mut rs = vec![res("struct node", How::Register, Some("make_node"), 8, "next"), weak("make_node"), weak("other")];
        infer_site_types(&mut rs);
        assert_eq!((rs[1].type_name.as_str(), rs[1].how), ("struct node", How::Site));
        assert_eq!((rs[2].type_name.as_str(), rs[2].how), ("long int", How::Alloc));
    }

    #[test]
    fn untyped_heap_samples_take_their_sites_type() {
        // Checks a site-only sample adopts the majority type of its site with the field (and its offset) seen at its offset; other sites stay untyped.
        let mut rs = vec![
            res("struct node", How::Register, Some("make_node"), 8, "next"),
            res("struct node", How::Register, Some("make_node"), 0, "key"),
            res("long", How::Register, Some("make_node"), 0, ""),
            res("[heap from make_node]", How::SiteOnly, Some("make_node"), 8, ""),
            res("[heap from other]", How::SiteOnly, Some("other"), 0, ""),
        ];
        infer_site_types(&mut rs);
        assert_eq!((rs[3].type_name.as_str(), rs[3].field.as_str(), rs[3].field_offset, rs[3].how), ("struct node", "next", 8, How::Site));
        assert_eq!(rs[4].how, How::SiteOnly);
    }
}
