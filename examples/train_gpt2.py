# train_gpt2.py -- the tutorial's first script (section 3.2), unchanged.
from verl.trainer import create_trainer
from verl.utils import load_config

if __name__ == "__main__":
    # 加载配置
    config = load_config("config_gpt2.yaml")
    # 创建训练器（自动初始化actor、rollout、critic等）
    trainer = create_trainer(config)
    # 开始训练（仅100步，几秒就跑完）
    for step in range(config.training.total_steps):
        metrics = trainer.step()
        if step % 10 == 0:
            print(f"Step {step}: reward={metrics['reward']:.3f}, kl={metrics['kl']:.3f}")
    print(" 训练完成！模型已保存到 ./outputs/gpt2-ppo/")
