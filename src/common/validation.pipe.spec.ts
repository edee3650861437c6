// How refused bodies are described: an absent field once, as required; a wrong one by its rules.
import { ArgumentMetadata } from '@nestjs/common';
import { Type } from 'class-transformer';
import { IsInt, IsOptional, IsString, Max, Min } from 'class-validator';
import { ValidationFailedError } from './domain-errors';
import { validationPipe } from './validation.pipe';

class Order {
  @IsString() userId: string;
  @Type(() => Number) @IsInt() @Min(1) @Max(2_147_483_647) productId: number;
  @IsOptional() @IsInt() @Min(1) quantity?: number;
}

const meta: ArgumentMetadata = { type: 'body', metatype: Order };

async function refusal(body: unknown): Promise<string> {
  try {
    await validationPipe().transform(body, meta);
  } catch (err) {
    if (err instanceof ValidationFailedError) return err.message;
    throw err;
  }
  throw new Error('accepted');
}

describe('validationPipe', () => {
  it('should say a missing field is required, once', async () => {
    expect(await refusal({ userId: 'alice' })).toBe('productId is required');
    expect(await refusal({})).toBe('userId is required; productId is required');
  });

  it('should list the rules a present but wrong field breaks, without its value', async () => {
    const message = await refusal({ userId: 'alice', productId: 0, quantity: 'secret-ish' });
    expect(message).toMatch(/productId must not be less than 1/);
    expect(message).toMatch(/quantity/);
    expect(message).not.toContain('secret-ish');
  });

  it('should not call an optional field missing', async () => {
    await expect(validationPipe().transform({ userId: 'alice', productId: 3 }, meta)).resolves.toMatchObject({
      productId: 3,
    });
  });
});
