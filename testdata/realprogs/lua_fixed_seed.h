/* Included into every Lua source file of the bench's builds (bench/optimize_realprogs.py): a fixed string-hash
   seed. Lua's own seed mixes time(), a heap and a stack address and &lua_newstate, so each code layout hashed
   differently and changed luaH_getshortstr's work by itself, whatever the profile. */
#define luai_makeseed(L) 0x2545f491u
