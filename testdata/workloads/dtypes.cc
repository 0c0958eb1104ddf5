/* C++ `new T` typed from the constructor's `this` (issue 28). */
class Counter {
public:
    long hits;
    long misses;
    Counter();
};

__attribute__((noinline)) Counter::Counter() : hits(0), misses(0) {}

Counter *counter;

__attribute__((noinline)) Counter *make_counter() {
    return new Counter();
}

__attribute__((noinline)) void hit() {
    counter->hits++;
}

int main() {
    counter = make_counter();
    for (int i = 0; i < 1000; i++)
        hit();
    return counter->hits == 1000 ? 0 : 1;
}
