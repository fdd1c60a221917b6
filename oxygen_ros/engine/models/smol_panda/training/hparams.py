"""Every hyper-parameter, seed, prompt and caption of the training, in one place.
A run directory records the values it started with (run.json); a resumed run trains with
the values here and logs (log.jsonl, `kind: hparams`) and prints any that differ."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

INSTRUCTION = "pick up the red cube and put it in the bowl"
# stage 1's caption prompt, appended after the observation prefix (its "<|im_start|>Task: ...;
# \nAction: " turn) as the node appends config/smol_panda.yaml's narration_prompt
NARRATION_PROMPT = "<|im_end|>\n<|im_start|>user\nWhere is the cube now?<|im_end|>\n<|im_start|>assistant\n"
# the node's narration and memory prompt (config/smol_panda.yaml): the same question, with the
# learned narration rows (training/narration.py) after it
NARRATION_PROMPT_LEARNED = NARRATION_PROMPT.replace("now?", "now?<|learned_narration|>")
CAPTIONS = {"table": "The cube is on the table.", "gripper": "The cube is in the gripper.",
            "bowl": "The cube is in the bowl."}
PLACES = ("table", "gripper", "bowl")          # the demos' place_names order
# config/smol_panda.yaml's answer_prompt: the learned prompt's rows stand after the question
ANSWER_PROMPT = ("<|im_end|>\n<|im_start|>user\nNotes about the robot's progress so far, oldest first:\n{memory}\n\n"
                 "The newest note: {latest}\n\nGiven the task above and these notes, answer in one sentence: "
                 "{question}<|learned_prompt|><|im_end|>\n<|im_start|>assistant\n")
# what the answer says, by the memory log's places (training/progress.py)
PROGRESS = {"not_yet": "I have not picked up the cube yet.",
            "holding": "I picked up the cube and I am holding it.",
            "done": "I picked up the cube and put it in the bowl.",
            "dropped": "I picked up the cube, but it fell back on the table."}
QUESTIONS = ("What have you done?", "What have you done so far?", "what have you done", "What did you do?",
             "Tell me what you have done.", "How far have you got?", "What progress have you made?",
             "What have you done until now?")
CAMERAS = {"base_0_rgb": "image_base", "left_wrist_0_rgb": "image_left_wrist"}   # slot -> npz key
DELTA_ACTION_MASK = (True,) * 7 + (False,)     # joints as deltas from the state; the finger width absolute
ACTION_RATE_HZ = 10.0


def held_out(seed: int) -> bool:
    """Training-seed episodes kept out of training to measure narration and flow loss on
    (1 in 20). The evaluation seeds (900000 up) are never recorded for training at all."""
    return seed % 20 == 0


@dataclass
class Stage1:
    seed: int = 1
    steps: int = 2500
    # first the encoder learns the scene from the heads alone (cheap: 0.5 s a step); 300 left the
    # cube's turn unlearnt (held-out error at the spread) and its place from READY at 7-9 cm
    aux_only_steps: int = 2000
    caption_batch: int = 4            # frames through the frozen SmolLM2 per step (the cost)
    aux_batch: int = 16               # frames through the encoder + auxiliary heads per step
    start_frames: int = 3000          # start frames over other layouts, rendered once (tools/start_frames.py)
    start_share: float = 0.25         # of the heads' frames drawn from them
    caption_start_share: float = 0.5  # of the caption frames drawn from them (places balanced: the
                                      # off-path ones teach the words to follow the cube, not the arm)
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup: int = 50
    grad_clip: float = 1.0
    aux_weight: float = 1.0
    projector_init_scale: float = 0.25   # image tokens start near SmolLM2's embedding norm
    checkpoint_every: int = 50
    eval_every: int = 100
    aux_eval_every: int = 250         # the heads on held-out frames: what the encoder knows
    eval_frames: int = 30             # held-out frames narrated greedily at each evaluation
    rescan_every: int = 100           # pick up episodes the recorder wrote meanwhile
    threads: int = 1                  # on a shared 2-core machine one thread ran 2x faster than two


@dataclass
class Stage2:
    seed: int = 2
    steps: int = 12000
    batch: int = 64
    lr: float = 3e-4
    weight_decay: float = 0.01
    warmup: int = 200
    grad_clip: float = 1.0
    frame_stride: int = 4             # every 4th frame of each episode gets its prefix K/V stored
    max_frames: int = 10000           # ~2 MB of fp16 K/V a frame: ~20 GB on disk (and page cache)
    early_frames: int = 10            # every frame of each episode's first second is stored (beyond the cap)
    early_share: float = 0.25         # of each batch drawn from those first seconds: from READY the image alone decides
    val_frames: int = 300             # from the held-out episodes: stage 2's validation
    checkpoint_every: int = 250
    eval_every: int = 500
    threads: int = 1
    time_beta: tuple = (1.5, 1.0)     # pi0's flow-time distribution: t = 0.001 + 0.999 * Beta(1.5, 1)


@dataclass
class Answers:
    """The learned answer prompt (training/answers.py): SmolLM2 frozen, only these rows learn,
    on the stored prefixes of stage 2 with memory logs made for each progress state."""
    seed: int = 3
    steps: int = 400
    batch: int = 8
    rows: int = 16                    # learned prompt embeddings
    init_text: str = " Answer from the notes: say whether the cube was picked up and if it is in the bowl."
    lr: float = 1e-2
    warmup: int = 10
    memory_size: int = 8              # config/smol_panda.yaml's memory_log_size
    run_notes: int = 8                # a place's run in a log: 1..run_notes notes (a note every 4 frames writes up to 8)
    note_noise: float = 0.05          # a note names another place (the narration is ~90% right)
    decision_weight: float = 4.0      # the loss's weight on the tokens that tell the answers apart (prompt_tuning.deciding_tokens)
    twins: bool = True                # each batch: batch / 2 frames, each with a log and its twin (answers.TWIN)
    checkpoint_every: int = 25
    eval_every: int = 25
    eval_samples: int = 48
    threads: int = 2


@dataclass
class Narration:
    """The learned narration prompt (training/narration.py): SmolLM2 frozen, only these rows
    learn, on the stored prefixes of stage 2, the three places equally often."""
    seed: int = 4
    steps: int = 300
    batch: int = 12
    rows: int = 16
    init_text: str = " Look at the gripper's camera: is the cube held between the fingers, on the table or in the bowl?"
    lr: float = 3e-3
    warmup: int = 10
    decision_weight: float = 4.0      # the loss's weight on the tokens that tell the places apart
    checkpoint_every: int = 25
    eval_every: int = 25
    threads: int = 2


@dataclass
class Hparams:
    stage1: Stage1 = field(default_factory=Stage1)
    stage2: Stage2 = field(default_factory=Stage2)
    answers: Answers = field(default_factory=Answers)
    narration: Narration = field(default_factory=Narration)

    def as_dict(self) -> dict:
        return asdict(self)
