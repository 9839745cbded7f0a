// main.cpp - the host side of the CMake example.
int run_example();
int main() { return run_example(); }
