-- String building, pattern matching and gsub: lua strings.lua N
local n = tonumber(arg[1] or "100000")
local parts = {}
for i = 1, n do parts[#parts + 1] = string.format("item%05d=%d;", i, i * 7 % 1000) end
local s = table.concat(parts)
local total, count = 0, 0
for k, v in s:gmatch("item(%d+)=(%d+);") do total = total + tonumber(v); count = count + 1 end
local replaced = s:gsub("item0", "X")
print("strings", count, total, #replaced)
