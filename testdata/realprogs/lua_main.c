/* A minimal stand-alone Lua interpreter: lua SCRIPT [ARGS...].
 * lua-src ships the Lua 5.4 library without lua.c; this is the part of lua.c
 * the benchmarks need (run one script, pass its arguments in `arg`). */
#include <stdio.h>
#include "lua.h"
#include "lualib.h"
#include "lauxlib.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s SCRIPT [ARGS...]\n", argv[0]);
        return 2;
    }
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_createtable(L, argc, 0);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");
    int status = luaL_loadfile(L, argv[1]);
    if (status == LUA_OK) {
        for (int i = 2; i < argc; i++) lua_pushstring(L, argv[i]);
        status = lua_pcall(L, argc - 2, 0, 0);
    }
    if (status != LUA_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], lua_tostring(L, -1));
        lua_close(L);
        return 1;
    }
    lua_close(L);
    return 0;
}
