module spindle/bench/peers/go

go 1.19
