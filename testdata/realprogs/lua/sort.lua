-- Tables, closures and table.sort with a Lua comparator: lua sort.lua N
local n = tonumber(arg[1] or "200000")
local seed = 12345
local function rand() seed = (seed * 1103515245 + 12345) % 2147483648; return seed end
local t = {}
for i = 1, n do t[i] = {key = rand() % 100000, id = i} end
table.sort(t, function(a, b) if a.key ~= b.key then return a.key < b.key end return a.id < b.id end)
local sum = 0
for i = 1, n, 97 do sum = sum + t[i].key end
print("sort", n, sum)
