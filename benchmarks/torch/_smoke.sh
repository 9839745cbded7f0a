# temporary device smoke test (deleted after use)
cd benchmarks/torch; L=/tmp/o/colocate; rm -rf /tmp/o; mkdir -p $L; S=10
python3 serve.py --model resnet50 --seconds 3 >$L/cap.log; R=$(awk '/^hp: capacity/{print $3/2}' $L/cap.log); echo rate $R
python3 serve.py --model resnet50 --rate $R --seconds $S --csv $L/alone-hp.hp.csv >$L/alone.log; tail -1 $L/alone.log
python3 train.py --seconds 5 >$L/be-alone-torch.be.log; tail -2 $L/be-alone-torch.be.log
co(){ env $2 python3 train.py >$L/$1-torch.be.log 2>$L/$1.err & p=$!
 until grep -q '^be: t=' $L/$1-torch.be.log; do sleep .2; done; sleep 1
 env $3 python3 serve.py --model resnet50 --rate $R --seconds $S --csv $L/$1-torch.hp.csv >$L/$1.hp.log 2>>$L/$1.err
 kill -TERM $p; wait $p; echo "$1 be rc=$?"; tail -1 $L/$1.hp.log; tail -2 $L/$1.err; }
co timeslice X=1 X=1
M=/tmp/mps; mkdir -p $M/p $M/l; export CUDA_MPS_PIPE_DIRECTORY=$M/p CUDA_MPS_LOG_DIRECTORY=$M/l; nvidia-cuda-mps-control -d; sleep 1
co mps X=1 X=1
echo get_server_list | nvidia-cuda-mps-control
co mps-prio CUDA_MPS_CLIENT_PRIORITY=1 CUDA_MPS_CLIENT_PRIORITY=0
echo quit | nvidia-cuda-mps-control; sleep 1; cp -r $M/l $L/mps-log; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
python3 streams.py --model resnet50 --rate $R --seconds $S --csv $L/streams-torch.hp.csv >$L/streams-torch.hp.log 2>$L/st.err; tail -1 $L/streams-torch.hp.log
python3 streams.py --model resnet50 --rate $R --seconds $S --switch-interval 0.005 --csv $L/streams5-torch.hp.csv >$L/streams5-torch.hp.log 2>>$L/st.err; tail -1 $L/streams5-torch.hp.log; tail -3 $L/st.err
B=$L/be-alone-torch.be.log
{ printf 'system\tbe\tbe_block_us\thp_csv\tbe_log\tbe_kind\tbe_ref\tstats\tnotes\n'
printf 'alone\tnone\t\t%s\t\t\t\t\tHP alone\n' $L/alone-hp.hp.csv
printf 'be-alone\ttorch\ttorch\t\t%s\tspin\t%s\t\tBE alone\n' $B $B
for s in timeslice mps mps-prio; do printf '%s\ttorch\ttorch\t%s\t%s\tspin\t%s\t\t\n' $s $L/$s-torch.hp.csv $L/$s-torch.be.log $B; done
for s in streams streams5; do printf '%s\ttorch\ttorch\t%s\t%s\tspin\t%s\t\t\n' $s $L/$s-torch.hp.csv $L/$s-torch.hp.log $B; done; } >$L/runs.tsv
echo "hp: resnet50 bf16 batch 1, Poisson $R req/s" >$L/device.txt
python3 ../../scripts/colocate-report.py /tmp/o; tar czf $OUT/o.tgz -C /tmp o
