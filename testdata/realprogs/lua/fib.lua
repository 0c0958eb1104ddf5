-- Recursive calls and integer arithmetic: lua fib.lua N
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
local n = tonumber(arg[1] or "30")
print("fib", n, fib(n))
